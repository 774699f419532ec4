"""An intake webhook receiver: verifies each request with the Standard Webhooks library.

pip install standardwebhooks==1.1.0
INTAKE_WEBHOOK_SECRET='whsec_…' PORT=8000 python3 receiver.py
"""

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

# The endpoint's signing secret for the environment received, `whsec_` prefix included.
hook = Webhook(os.environ["INTAKE_WEBHOOK_SECRET"])


def handle(event):
    """Your code. Store or queue the event and return quickly: intake waits for the answer.
    Deliveries can repeat; deduplicate on data.id with type and timestamp."""
    print(json.dumps({"type": event["type"], "id": event["data"]["id"]}), flush=True)


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        # The bytes as received: the signature covers them, not JSON parsed and written again.
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            event = hook.verify(body, dict(self.headers.items()))
        except (WebhookVerificationError, ValueError) as err:
            # ValueError: malformed signature headers, or a body that is not UTF-8 JSON.
            self.log_message("refused: %r", err)
            self.send_response(400)
        else:
            handle(event)
            self.send_response(204)  # any 2xx: received, not sent again
        self.end_headers()


if __name__ == "__main__":
    ThreadingHTTPServer(("", int(os.environ.get("PORT", "8000"))), Receiver).serve_forever()

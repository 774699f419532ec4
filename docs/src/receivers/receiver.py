"""An intake webhook receiver, verified with the Standard Webhooks library.

pip install standardwebhooks==1.1.0
INTAKE_WEBHOOK_SECRET='whsec_…' PORT=8000 python3 receiver.py
"""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

# The endpoint's secret for the environment received, with its `whsec_`.
hook = Webhook(os.environ["INTAKE_WEBHOOK_SECRET"])


# Requests are handled in threads, and deliveries arrive in parallel.
print_lock = threading.Lock()


def handle(event):
    """Your code: store or queue the event and return quickly, as intake
    waits for the answer. Deliveries can repeat: deduplicate on data.id
    with type and timestamp."""
    line = {"type": event["type"], "id": event["data"]["id"]}
    with print_lock:  # else two lines can mix
        print(json.dumps(line), flush=True)


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        # The bytes as received: the signature covers them, not JSON
        # parsed and written again.
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length)
        try:
            event = hook.verify(body, dict(self.headers.items()))
        except (WebhookVerificationError, ValueError) as err:
            # ValueError: malformed signature headers, or a body that is
            # not UTF-8 JSON.
            self.log_message("refused: %r", err)
            self.send_response(400)
        else:
            handle(event)
            self.send_response(204)  # any 2xx: received, not sent again
        self.end_headers()


if __name__ == "__main__":
    port = int(os.environ.get("PORT", "8000"))
    ThreadingHTTPServer(("", port), Receiver).serve_forever()

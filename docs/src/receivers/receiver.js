// An intake webhook receiver, verified with the Standard Webhooks library.
//
//   npm install standardwebhooks@1.1.1
//   INTAKE_WEBHOOK_SECRET='whsec_…' PORT=8000 node receiver.js

const http = require("node:http");
const { Webhook } = require("standardwebhooks");

// The endpoint's secret for the environment received, with its `whsec_`.
const hook = new Webhook(process.env.INTAKE_WEBHOOK_SECRET);

// Your code: store or queue the event and return quickly, as intake waits
// for the answer. Deliveries can repeat: deduplicate on data.id with type
// and timestamp.
function handle(event) {
  console.log(JSON.stringify({ type: event.type, id: event.data.id }));
}

http
  .createServer((req, res) => {
    if (req.method !== "POST") return res.writeHead(405).end();
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      // The bytes as received: the signature covers them, not JSON parsed
      // and written again.
      const body = Buffer.concat(chunks);
      let event;
      try {
        // Node gives the header names in lower case, as verify wants them.
        event = hook.verify(body, req.headers);
      } catch (err) {
        // A WebhookVerificationError (signature, timestamp, headers), or
        // a body that is not JSON.
        console.error(`refused: ${err.message}`);
        return res.writeHead(400).end();
      }
      handle(event);
      res.writeHead(204).end(); // any 2xx: received, not sent again
    });
  })
  .listen(Number(process.env.PORT || 8000));

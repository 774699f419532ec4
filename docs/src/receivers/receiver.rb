# An intake webhook receiver: verifies each request with the Standard Webhooks library.
#
#   gem install standardwebhooks webrick
#   INTAKE_WEBHOOK_SECRET='whsec_…' PORT=8000 ruby receiver.rb

require "json"
require "standardwebhooks"
require "webrick"

$stdout.sync = true

# The endpoint's signing secret for the environment received, `whsec_` prefix included.
hook = StandardWebhooks::Webhook.new(ENV.fetch("INTAKE_WEBHOOK_SECRET"))

# Your code. Store or queue the event and return quickly: intake waits for the answer.
# Deliveries can repeat; deduplicate on data.id with type and timestamp.
def handle(event)
  puts JSON.generate({ type: event["type"], id: event["data"]["id"] })
end

server = WEBrick::HTTPServer.new(Port: Integer(ENV.fetch("PORT", "8000")), AccessLog: [])
server.mount_proc "/" do |req, res|
  raise WEBrick::HTTPStatus::MethodNotAllowed unless req.request_method == "POST"

  # The library looks the headers up by these lower-case names; WEBrick's req[] ignores case.
  headers = %w[webhook-id webhook-timestamp webhook-signature].to_h { |name| [name, req[name]] }
  # The bytes as received: the signature covers them, not JSON parsed and written again.
  body = req.body || ""
  begin
    hook.verify(body, headers)
    # Parsed here, not taken from verify: gem versions before 1.1 give Symbol keys.
    event = JSON.parse(body)
  rescue StandardError => e
    # A WebhookVerificationError (signature, timestamp, headers), or malformed input the
    # library does not catch itself (a body that is not JSON, a `v1` entry without a comma).
    warn "refused: #{e.message}"
    res.status = 400
    next
  end
  handle(event)
  res.status = 204 # any 2xx: received, not sent again
end

trap("INT") { server.shutdown }
trap("TERM") { server.shutdown }
server.start

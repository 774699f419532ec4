# An intake webhook receiver, verified with the Standard Webhooks library.
#
#   gem install standardwebhooks webrick
#   INTAKE_WEBHOOK_SECRET='whsec_…' PORT=8000 ruby receiver.rb

require "json"
require "standardwebhooks"
require "webrick"

$stdout.sync = true

# The endpoint's secret for the environment received, with its `whsec_`.
hook = StandardWebhooks::Webhook.new(ENV.fetch("INTAKE_WEBHOOK_SECRET"))

# Your code: store or queue the event and return quickly, as intake waits
# for the answer. Deliveries can repeat: deduplicate on data.id with type
# and timestamp.
def handle(event)
  line = JSON.generate({ type: event["type"], id: event["data"]["id"] })
  # One write: WEBrick handles requests in threads, so lines must not mix.
  $stdout.write("#{line}\n")
end

port = Integer(ENV.fetch("PORT", "8000"))
server = WEBrick::HTTPServer.new(Port: port, AccessLog: [])
server.mount_proc "/" do |req, res|
  unless req.request_method == "POST"
    raise WEBrick::HTTPStatus::MethodNotAllowed
  end

  # The gem reads the headers from a Hash by these lower-case names;
  # WEBrick's req[] ignores case.
  names = %w[webhook-id webhook-timestamp webhook-signature]
  headers = names.to_h { |name| [name, req[name]] }
  # The bytes as received: the signature covers them, not JSON parsed and
  # written again.
  body = req.body || ""
  begin
    hook.verify(body, headers)
    # Parsed here, not taken from verify: before 1.1 the gem gives Symbol
    # keys.
    event = JSON.parse(body)
  rescue StandardError => e
    # A WebhookVerificationError (signature, timestamp, headers), or input
    # the gem does not check itself (a body that is not JSON, a `v1` entry
    # without a comma).
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

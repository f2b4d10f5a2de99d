"""The voice carrier: a Twilio-compatible REST client for live calls and the simulator for
test-mode calls, behind the `Carrier` interface (app/integrations/telephony/base.py)."""

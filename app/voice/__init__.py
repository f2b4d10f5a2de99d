"""Live voice: the agent holds real phone calls over the carrier's bidirectional media streams.

The carrier connects each answered live call to this service's public URL (TwiML
`<Connect><Stream>`, app/integrations/telephony/twilio.py); the stream is authenticated by a
single-use token bound to the call (tokens.py) and runs through a pipecat pipeline
(pipeline.py: serializer, VAD, speech to text, the conversation engine, speech, transport).
The call's session (session.py) keeps the transcript, acts through the carrier's REST API
(hang up, transfer, voicemail) and records the end. A browser session (browser.py) runs the
same call on a web page's websocket. docs/architecture.md, "Live voice".
"""

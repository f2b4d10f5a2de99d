"""Frames of our own that travel the call's pipeline beside pipecat's."""

from __future__ import annotations

from dataclasses import dataclass

from pipecat.frames.frames import SystemFrame

# The event of the pipeline's messages that carry a transcript segment as it is said.
TRANSCRIPT_MESSAGE = "transcript"


@dataclass
class StreamFault(SystemFrame):
    """The stream broke its protocol (`reason`: malformed_stream, oversized_message): the
    call ends with that reason."""

    reason: str = "stream_error"


@dataclass
class StreamStopped(SystemFrame):
    """The carrier ended the stream (`stop`): the caller hung up, or the call moved on."""


@dataclass
class CarrierMark(SystemFrame):
    """The carrier played everything sent before the mark named `name`."""

    name: str = ""

"""The transcript and metadata service behind ``process_youtube_video``.

YouTube offers no transcript API to bots, so the product asks a service the operator runs
(``YOUTUBE_TRANSCRIPT_URL``; without it the tool is never offered, DESIGN §5). Its contract:

``GET {YOUTUBE_TRANSCRIPT_URL}/videos/{video_id}`` answers 200 with
``{"title": str, "channel": str, "duration_seconds": int | null, "transcript": str}``
(``transcript`` may be empty: a video without captions), or 404 for an unknown video. Any
other answer is a failure the model is told about in one sentence.

The sandbox serves this contract for the demo and the tests (`chat.sandbox.server`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from chat.llm.tls import tls_context

VIDEO_ID = re.compile(
    r"(?:youtube\.com/(?:watch\?(?:\S*&)?v=|shorts/|live/|embed/)|youtu\.be/)([\w-]{6,20})"
)
TIMEOUT_SECONDS = 15.0


class TranscriptUnavailable(Exception):
    """The service has no transcript for the video, or could not be asked; the message says
    which, in words the model may read (never the service's URL)."""


@dataclass(frozen=True)
class VideoTranscript:
    video_id: str
    title: str
    channel: str
    duration_seconds: int | None
    transcript: str


class _Answer(BaseModel):
    title: str = ""
    channel: str = ""
    duration_seconds: int | None = None
    transcript: str = ""


def youtube_video_id(link: str) -> str | None:
    """The video id in a YouTube link (``watch?v=``, ``youtu.be/``, ``shorts/``, ``live/``,
    ``embed/``), or None when ``link`` is not one."""
    match = VIDEO_ID.search(link)
    return match[1] if match else None


class VideoTranscriptService:
    """The operator's transcript service at ``base_url`` (``YOUTUBE_TRANSCRIPT_URL``)."""

    def __init__(self, base_url: str, *, timeout: float = TIMEOUT_SECONDS) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = timeout

    async def transcript(self, video_id: str) -> VideoTranscript:
        """The video's metadata and transcript; raises `TranscriptUnavailable`."""
        url = f"{self.base_url}/videos/{quote(video_id, safe='')}"
        try:
            async with httpx.AsyncClient(timeout=self._timeout, verify=tls_context()) as http:
                response = await http.get(url)
        except httpx.HTTPError as error:
            raise TranscriptUnavailable(
                f"the transcript service could not be reached ({type(error).__name__})"
            ) from None
        if response.status_code == 404:
            raise TranscriptUnavailable("no such video, or it has no transcript")
        if response.status_code != 200:
            raise TranscriptUnavailable(
                f"the transcript service answered HTTP {response.status_code}"
            )
        try:
            answer = _Answer.model_validate_json(response.content)
        except ValidationError:
            raise TranscriptUnavailable(
                "the transcript service answered something unreadable"
            ) from None
        return VideoTranscript(
            video_id=video_id,
            title=answer.title,
            channel=answer.channel,
            duration_seconds=answer.duration_seconds,
            transcript=answer.transcript,
        )

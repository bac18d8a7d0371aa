"""The argument models of the Deliberate Tool Mode tools (`chat.llm.tools`): each is the single
source of its tool's JSON schema and of the validation of what the model sends."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from chat.pipeline.memory import MAX_CATEGORIES


class ToolArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadFileArguments(ToolArguments):
    media_id: str = Field(
        pattern=r"^media_\d+$",
        description="The file's media id as shown in the conversation, e.g. media_3.",
    )


class RevealMessageMetadataArguments(ToolArguments):
    ref: str = Field(
        pattern=r"^ref_\d+$",
        description="The message reference as shown in the conversation, e.g. ref_12.",
    )


CategoryName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=40)]
CategoryText = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=300)
]


class UpdateShortTermMemoryArguments(ToolArguments):
    summary: str = Field(
        default="",
        max_length=4000,
        description=(
            "The complete new summary of this conversation, at most 1,500 characters (longer "
            "is cut); it replaces the old memory."
        ),
    )
    categories: dict[CategoryName, CategoryText] = Field(
        default_factory=dict,
        max_length=MAX_CATEGORIES,
        description=(
            f"Instead of (or beside) a summary: up to {MAX_CATEGORIES} short named notes, "
            'e.g. {"plans": "gig on Sunday", "mood": "excited"}.'
        ),
    )

    @model_validator(mode="after")
    def _something_to_remember(self) -> UpdateShortTermMemoryArguments:
        if not self.summary.strip() and not self.categories:
            raise ValueError("give a summary or at least one category")
        return self


class RememberArguments(ToolArguments):
    scope: Literal["user", "server", "persona"] = Field(
        description=(
            '"user": a fact about the person who wrote the message ref names, that they said '
            'about themselves. "server": a fact the whole server shares. "persona": something '
            "you yourself decided to remember as this character (a promise you made, how you "
            "agreed to call someone, a plan of yours); only you recall it."
        )
    )
    fact: str = Field(
        min_length=1,
        max_length=2000,
        description=(
            "The fact, short and in the third person, naming the person "
            '(e.g. "Alice\'s cat is called Miso"); for scope persona, in your own words '
            '(e.g. "I promised to call Alice Captain").'
        ),
    )
    ref: str = Field(
        pattern=r"^ref_\d+$",
        description="The message (ref_N) in which it was said; for scope user, written by "
        "the person the fact is about; for scope persona, the message you are answering.",
    )


class AnalyzeImageArguments(ToolArguments):
    media_id: str = Field(
        pattern=r"^media_\d+$",
        description="The image's media id as shown in the conversation, e.g. media_2.",
    )
    question: str = Field(
        default="Describe this image in detail.",
        max_length=500,
        description="What to find out about the image.",
    )


class ProcessGifArguments(ToolArguments):
    media_id: str = Field(
        pattern=r"^media_\d+$",
        description="The GIF's media id as shown in the conversation, e.g. media_4.",
    )
    question: str = Field(
        default="Describe what happens in this animation.",
        max_length=500,
        description="What to find out about the animation.",
    )


class ProcessYoutubeVideoArguments(ToolArguments):
    link: str = Field(
        max_length=300,
        description="The YouTube link as it appears in the conversation.",
    )


class SendStickerArguments(ToolArguments):
    name: str = Field(
        min_length=1,
        max_length=60,
        description="The sticker's name, one of those listed in this tool's description.",
    )

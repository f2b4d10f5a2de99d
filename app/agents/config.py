"""`agent_config`: how a voice agent talks, thinks and acts, validated with its defaults.

The API names the fields and says which have defaults, but leaves the provider values and the
tool item shapes open; the choices below are documented in docs/api.md ("Agents"). A stored
config is always the normalized form (`model_dump(mode="json")` of `AgentConfig`), defaults
filled in, so reads never re-apply defaults and a full update replaces it whole.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from app.agents.analysis_schema import MAX_CRITERIA_LENGTH, check_analysis_schema
from app.agents.analysis_schema import MAX_PROPERTIES as MAX_ANALYSIS_PROPERTIES
from app.core.jsonutil import dumps
from app.kit.errors import InvalidInput
from app.kit.phone import to_e164
from app.kit.validation import HTTP_URL_PATTERN, NOT_BLANK_CHAR, NOT_BLANK_PATTERN, JsonObject

LlmProvider = Literal["openai", "anthropic", "groq"]
VoiceProvider = Literal["elevenlabs", "cartesia"]
CalendarProvider = Literal["google_calendar", "cal_com"]
HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
McpTransport = Literal["streamable_http", "sse"]

DEFAULT_LANGUAGE = "en-US"
DEFAULT_LLM_PROVIDER: LlmProvider = "openai"
# The model used when `llm_model` is left out: one per provider, so the pair always works.
DEFAULT_LLM_MODELS: dict[str, str] = {
    "openai": "gpt-4o-mini",
    "anthropic": "claude-3-5-haiku-latest",
    "groq": "llama-3.3-70b-versatile",
}
DEFAULT_TEMPERATURE = 0.7
DEFAULT_VOICE_PROVIDER: VoiceProvider = "elevenlabs"
DEFAULT_CALENDAR_PROVIDER: CalendarProvider = "google_calendar"
DEFAULT_TOOL_METHOD: HttpMethod = "POST"
DEFAULT_MCP_TRANSPORT: McpTransport = "streamable_http"
# The capability name `tasks` shows for an agent that may book appointments.
BOOKING_TASK = "book_appointment"

MAX_PROMPT_LENGTH = 20_000
MAX_TEXT_LENGTH = 2_000
MAX_URL_LENGTH = 2048
MAX_CUSTOM_TOOLS = 50
MAX_MCP_TOOLS = 20
MAX_ALLOWED_TOOLS = 100
MAX_PARAMETERS_BYTES = 16 * 1024

# A BCP-47 tag such as `en-US`, `es`, `pt-BR`, `zh-Hant-TW`.
LanguageTag = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8}){0,3}$", max_length=35)
]
# Tool names follow the function-calling rule of the LLM providers.
ToolName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")]
ModelName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,99}$", max_length=100)
]
# Non-blank text: at least one character that is not white space.
Text = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_TEXT_LENGTH, pattern=NOT_BLANK_PATTERN)
]
# Checked here for its form only (clear messages in `_check_url`); the document shows the
# stricter form the outbound URL guard accepts (HTTP_URL_PATTERN), which judges it on write.
HttpUrl = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        max_length=MAX_URL_LENGTH,
        pattern=rf"^[Hh][Tt][Tt][Pp][Ss]?://{NOT_BLANK_CHAR}+$",
    ),
    WithJsonSchema({"type": "string", "maxLength": MAX_URL_LENGTH, "pattern": HTTP_URL_PATTERN}),
]


def _check_url(url: str) -> str:
    """http(s) with a host; no credentials in it (tool calls must not leak them in logs)."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError("URL must include a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("URL must not contain credentials")
    return url


def _check_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema of an object, the form LLM function calling takes: `type` `object`,
    `properties` an object of schemas, `required` names among them."""
    if len(dumps(schema)) > MAX_PARAMETERS_BYTES:
        raise ValueError(f"parameters must serialize to at most {MAX_PARAMETERS_BYTES} bytes")
    if schema.get("type", "object") != "object":
        raise ValueError('parameters must be a JSON Schema with "type": "object"')
    properties = schema.get("properties", {})
    if not isinstance(properties, dict) or not all(
        isinstance(item, dict) for item in properties.values()
    ):
        raise ValueError("parameters.properties must map each parameter name to a JSON Schema")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(item, str) for item in required):
        raise ValueError("parameters.required must be a list of parameter names")
    unknown = [name for name in required if name not in properties]
    if unknown:
        raise ValueError(f"parameters.required names unknown properties: {', '.join(unknown)}")
    return {"type": "object", **schema, "properties": properties}


def _unique_names(items: list[Any], what: str) -> list[Any]:
    names = [item.name for item in items]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{what} names must be unique; repeated: {', '.join(repeated)}")
    return items


class _Input(BaseModel):
    model_config = ConfigDict(extra="ignore")


class VoiceSettings(_Input):
    voice_id: Annotated[
        str, StringConstraints(min_length=1, max_length=255, pattern=NOT_BLANK_PATTERN)
    ]
    name: Annotated[str, StringConstraints(min_length=1, max_length=255, pattern=NOT_BLANK_PATTERN)]
    provider: VoiceProvider = DEFAULT_VOICE_PROVIDER


class BookingConfig(_Input):
    # Strict: `0`, `"false"` or `"no"` are refused, as the document's `boolean` says.
    booking_enabled: StrictBool = False
    provider: CalendarProvider = DEFAULT_CALENDAR_PROVIDER
    prompt: str | None = Field(default=None, max_length=MAX_TEXT_LENGTH)


class CustomTool(_Input):
    """A REST endpoint the agent may call mid-call, described like an LLM function."""

    name: ToolName
    description: Text
    url: HttpUrl
    method: HttpMethod = DEFAULT_TOOL_METHOD
    parameters: JsonObject = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description='JSON Schema of the arguments: {"type": "object", "properties": {...}, '
        '"required": [...]}',
    )

    _url = field_validator("url")(_check_url)
    _parameters = field_validator("parameters")(_check_parameters)


class McpTool(_Input):
    """A Model Context Protocol server whose tools the agent may use."""

    name: ToolName
    url: HttpUrl
    transport: McpTransport = DEFAULT_MCP_TRANSPORT
    allowed_tools: (
        Annotated[list[ToolName], Field(min_length=1, max_length=MAX_ALLOWED_TOOLS)] | None
    ) = Field(default=None, description="Tools the agent may call; null allows every tool")

    _url = field_validator("url")(_check_url)

    @field_validator("allowed_tools")
    @classmethod
    def _distinct(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else list(dict.fromkeys(value))


class AgentConfig(_Input):
    welcome_message: str | None = Field(default=None, max_length=MAX_TEXT_LENGTH)
    system_prompt: str | None = Field(default=None, max_length=MAX_PROMPT_LENGTH)
    language: LanguageTag = DEFAULT_LANGUAGE
    llm_provider: LlmProvider = DEFAULT_LLM_PROVIDER
    # None until validated: then the provider's default model.
    llm_model: ModelName | None = None
    temperature: StrictFloat = Field(default=DEFAULT_TEMPERATURE, ge=0.0, le=1.0)
    # An OpenAI-compatible endpoint (its base URL, e.g. https://llm.example.com/v1) that
    # writes replies in simulated calls; without one a deterministic responder answers.
    llm_base_url: HttpUrl | None = None
    voice_settings: VoiceSettings | None = None
    # Live calls: where `transfer_to_human` sends the caller (a cold transfer; E.164), and
    # what the agent says to an answering machine after the beep (none: it hangs up).
    transfer_phone_number: str | None = Field(
        default=None,
        max_length=50,
        description="E.164 number a live call is transferred to on transfer_to_human",
        examples=["+14155550123"],
    )
    voicemail_message: str | None = Field(default=None, max_length=MAX_TEXT_LENGTH)
    booking_config: BookingConfig = Field(default_factory=BookingConfig)
    custom_tools: list[CustomTool] = Field(default_factory=list, max_length=MAX_CUSTOM_TOOLS)
    mcp_tools: list[McpTool] = Field(default_factory=list, max_length=MAX_MCP_TOOLS)
    # Call analysis (docs/api.md, "Call analysis"): what to extract from each finished call,
    # and what makes a call a success.
    analysis_schema: JsonObject | None = Field(
        default=None,
        description="A JSON Schema (draft 2020-12) of an object: the structured data "
        "extracted from each finished call into its call log's `analysis.data`. It must be "
        "a valid schema, refer only within itself and serialize to at most 16 KiB (400).",
        # What a JSON Schema can say of it; the rest is in the description.
        json_schema_extra={
            "required": ["type", "properties"],
            "properties": {
                "type": {"const": "object"},
                "properties": {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": MAX_ANALYSIS_PROPERTIES,
                    "additionalProperties": {"type": ["object", "boolean"]},
                },
            },
        },
    )
    success_criteria: str | None = Field(
        default=None,
        max_length=MAX_CRITERIA_LENGTH,
        pattern=NOT_BLANK_PATTERN,
        description="What makes a call a success, in words; judged after each call "
        "(`analysis.success`)",
    )

    _llm_base_url = field_validator("llm_base_url")(
        lambda value: None if value is None else _check_url(value)
    )

    @field_validator("transfer_phone_number")
    @classmethod
    def _e164(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return to_e164(value, "transfer_phone_number")
        except InvalidInput as exc:
            raise ValueError(exc.message) from exc

    @field_validator("analysis_schema")
    @classmethod
    def _analysis_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_analysis_schema(value)

    @field_validator("custom_tools")
    @classmethod
    def _custom_tool_names(cls, value: list[CustomTool]) -> list[CustomTool]:
        return _unique_names(value, "custom_tools")

    @field_validator("mcp_tools")
    @classmethod
    def _mcp_tool_names(cls, value: list[McpTool]) -> list[McpTool]:
        return _unique_names(value, "mcp_tools")

    @model_validator(mode="after")
    def _default_model(self) -> AgentConfig:
        if self.llm_model is None:
            self.llm_model = DEFAULT_LLM_MODELS[self.llm_provider]
        return self

    def normalized(self) -> dict[str, Any]:
        """What is stored: every field, defaults filled in."""
        return self.model_dump(mode="json")


def capability_names(config: dict[str, Any]) -> list[str]:
    """`tasks` of the get-agent shape: what the agent can do besides talking.

    `book_appointment` when booking is on, then each custom tool by name, then each MCP
    server's allowed tools as `server.tool` (`server.*` when every tool is allowed).
    """
    names: list[str] = []
    if (config.get("booking_config") or {}).get("booking_enabled"):
        names.append(BOOKING_TASK)
    names.extend(tool["name"] for tool in config.get("custom_tools") or [])
    for server in config.get("mcp_tools") or []:
        allowed = server.get("allowed_tools")
        if allowed is None:
            names.append(f"{server['name']}.*")
        else:
            names.extend(f"{server['name']}.{tool}" for tool in allowed)
    return list(dict.fromkeys(names))


def configuration_summary(config: dict[str, Any]) -> dict[str, Any]:
    """`configuration` of the get-agent shape; `voice` is the voice_id, null until set."""
    voice = config.get("voice_settings")
    return {
        "language": config.get("language", DEFAULT_LANGUAGE),
        "voice": voice["voice_id"] if voice else None,
        "model": config.get("llm_model") or DEFAULT_LLM_MODELS[DEFAULT_LLM_PROVIDER],
        "temperature": config.get("temperature", DEFAULT_TEMPERATURE),
    }

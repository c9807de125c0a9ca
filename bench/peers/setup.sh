#!/usr/bin/env bash
# Makes (or completes) a Python virtual environment with the peer engines used by peer_conv.py:
# onnxruntime, OpenVINO, ncnn and PyTorch (CPU use; its wheel brings CUDA libraries too, about
# 6 GB in all, a minute to install).
# Usage: source "$(bench/peers/setup.sh)"   (prints the activate script's path)
set -euo pipefail
venv=${PEERS_VENV:-$HOME/.cache/autodnn-peers}
[[ -x $venv/bin/python ]] || python3 -m venv "$venv" >&2
if ! "$venv/bin/python" -c 'import numpy, onnx, onnxruntime, openvino, ncnn, threadpoolctl, torch, torchvision' 2>/dev/null; then
  "$venv/bin/pip" install -q --upgrade pip >&2
  "$venv/bin/pip" install -q numpy onnx onnxruntime openvino ncnn threadpoolctl torch torchvision >&2
fi
echo "$venv/bin/activate"

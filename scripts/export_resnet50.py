#!/usr/bin/env python3
"""Exports torchvision's ResNet-50 (random weights, seeded) for `examples/resnet50.rs`.

    python scripts/export_resnet50.py OUT_DIR [--mb N] [--seed S] [--no-onnx]

Builds `torchvision.models.resnet50(weights=None)` after `torch.manual_seed(seed)`, gives
every BatchNorm non-trivial running statistics and affine parameters (seeded random values,
so that folding them into the convolutions is exercised), switches to eval mode and writes
into OUT_DIR:

- `<layer>.weight.npy` for every convolution (OIHW, float32);
- `<bn>.weight.npy`, `<bn>.bias.npy`, `<bn>.running_mean.npy`, `<bn>.running_var.npy` for
  every BatchNorm (its eps is in the manifest);
- `fc.weight.npy` ([1000, 2048]) and `fc.bias.npy` (scaled so that the logits' standard
  deviation is 3: a random classifier otherwise saturates the softmax);
- `input.npy`: a seeded input batch [N, 3, 224, 224];
- `torch_logits.npy` and `torch_probs.npy`: PyTorch's eval-mode output and its softmax;
- `manifest.json`: the layers in execution order (see below);
- `resnet50.onnx` (unless --no-onnx): the same model, for the onnxruntime timings;
- `resnet50_state.pt`: the state dict, for the PyTorch timings (`bench/resnet50-e2e.py`).

Manifest entries (in execution order) have a `kind`:
- `conv`: name, bn (its BatchNorm), in/out channels, kernel, stride, padding, `input`
  (tensor name), `output`, `relu` (true when a ReLU follows, after the residual when
  there is one), `residual` (tensor name added before the ReLU, or null);
- `maxpool`: kernel, stride, padding, input, output;
- `avgpool` (global), `fc` (name, in, out), `softmax`.
Tensor names are the producing layer's name ("input" for the image).
Nothing is downloaded.
"""

import argparse
import json
import os

import numpy as np
import torch
import torchvision


def save(out, name, t):
    np.save(os.path.join(out, name + ".npy"), t.detach().cpu().numpy().astype(np.float32))


def randomise_bn(model, gen):
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            c = m.num_features
            # The last BN of each bottleneck smaller (as zero_init_residual would, but not
            # zero) so that the residual stream does not grow block after block.
            lo, span = (0.1, 0.2) if name.endswith("bn3") else (0.5, 1.0)
            with torch.no_grad():
                m.weight.copy_(lo + span * torch.rand(c, generator=gen))
                m.bias.copy_(0.2 * torch.randn(c, generator=gen))
                m.running_mean.copy_(0.2 * torch.randn(c, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(c, generator=gen))


def conv_entry(name, conv, bn, inp, out, relu, residual=None):
    return {
        "kind": "conv",
        "name": name,
        "bn": bn,
        "in_channels": conv.in_channels,
        "out_channels": conv.out_channels,
        "kernel": list(conv.kernel_size),
        "stride": list(conv.stride),
        "padding": list(conv.padding),
        "weight_shape": list(conv.weight.shape),
        "input": inp,
        "output": out,
        "relu": relu,
        "residual": residual,
    }


def manifest(model, eps):
    layers = [conv_entry("conv1", model.conv1, "bn1", "input", "conv1", True)]
    mp = model.maxpool
    layers.append(
        {
            "kind": "maxpool",
            "name": "maxpool",
            "kernel": [mp.kernel_size] * 2,
            "stride": [mp.stride] * 2,
            "padding": [mp.padding] * 2,
            "input": "conv1",
            "output": "maxpool",
        }
    )
    cur = "maxpool"
    for li in range(1, 5):
        layer = getattr(model, f"layer{li}")
        for bi, block in enumerate(layer):
            p = f"layer{li}.{bi}"
            if block.downsample is not None:
                ds = block.downsample
                layers.append(
                    conv_entry(f"{p}.downsample.0", ds[0], f"{p}.downsample.1", cur,
                               f"{p}.downsample.0", False)
                )
                shortcut = f"{p}.downsample.0"
            else:
                shortcut = cur
            layers.append(conv_entry(f"{p}.conv1", block.conv1, f"{p}.bn1", cur, f"{p}.conv1", True))
            layers.append(
                conv_entry(f"{p}.conv2", block.conv2, f"{p}.bn2", f"{p}.conv1", f"{p}.conv2", True)
            )
            layers.append(
                conv_entry(f"{p}.conv3", block.conv3, f"{p}.bn3", f"{p}.conv2", f"{p}.conv3", True,
                           residual=shortcut)
            )
            cur = f"{p}.conv3"
    layers.append({"kind": "avgpool", "name": "avgpool", "input": cur, "output": "avgpool"})
    layers.append(
        {
            "kind": "fc",
            "name": "fc",
            "in_features": model.fc.in_features,
            "out_features": model.fc.out_features,
            "input": "avgpool",
            "output": "fc",
        }
    )
    layers.append({"kind": "softmax", "name": "softmax", "input": "fc", "output": "softmax"})
    return {"model": "resnet50", "bn_eps": eps, "layers": layers}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--mb", type=int, default=1, help="batch of input.npy (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-onnx", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(args.seed)
    model = torchvision.models.resnet50(weights=None)
    gen = torch.Generator().manual_seed(args.seed + 1)
    randomise_bn(model, gen)
    model.eval()

    eps = None
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Conv2d):
            assert m.bias is None and m.groups == 1 and m.dilation == (1, 1)
            save(args.out, name + ".weight", m.weight)
        elif isinstance(m, torch.nn.BatchNorm2d):
            for attr in ("weight", "bias", "running_mean", "running_var"):
                save(args.out, f"{name}.{attr}", getattr(m, attr))
            assert eps is None or eps == m.eps
            eps = m.eps

    x = torch.randn(args.mb, 3, 224, 224, generator=torch.Generator().manual_seed(args.seed + 2))
    save(args.out, "input", x)
    with torch.no_grad():
        # Scale the classifier so that the logits spread over a few units (random weights
        # otherwise give a saturated softmax, which would check little).
        scale = 3.0 / model(x).std().item()
        model.fc.weight.mul_(scale)
        model.fc.bias.mul_(scale)
        logits = model(x)
    save(args.out, "fc.weight", model.fc.weight)
    save(args.out, "fc.bias", model.fc.bias)
    save(args.out, "torch_logits", logits)
    save(args.out, "torch_probs", torch.softmax(logits.double(), dim=1).float())

    torch.save(model.state_dict(), os.path.join(args.out, "resnet50_state.pt"))
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest(model, eps), f, indent=1)

    if not args.no_onnx:
        torch.onnx.export(
            model,
            (x,),
            os.path.join(args.out, "resnet50.onnx"),
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes={"input": {0: "n"}, "logits": {0: "n"}},
            opset_version=17,
            dynamo=False,
        )
    print(f"wrote {args.out}: batch {args.mb}, {len(os.listdir(args.out))} files")


if __name__ == "__main__":
    main()

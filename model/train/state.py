"""What --resume continues from (train_state/: the weights, the optimizer, the progress, the last epochs'
snapshots), and the weights a run starts from (--init-from, grown by --grow-encoder)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from model.checkpoint import unique_state_dict
from model.transformer import Transformer

STATE = "train_state"  # subdirectory of --out holding what resuming needs


def save_state(dir_: Path, model, optimizer, info: dict) -> None:
    """Writes what --resume needs to dir_: the weights, the optimizer's state and torch's random number generators
    (last.safetensors), the progress in info, the optimizer's settings and Python's generator (state.json)."""
    dir_.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in unique_state_dict(model).items()}
    opt = optimizer.state_dict()
    for pid, st in opt["state"].items():
        for k, v in st.items():
            tensors[f"opt.{pid}.{k}"] = v.detach().cpu().reshape(v.shape).contiguous()
    # The generators as they are after the last update: the dropout masks a resumed run draws are the next ones the
    # run would have drawn, so that stop and --resume trains as the run would have gone on.
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["rng.cuda"] = torch.cuda.get_rng_state()  # the current device's: where this process's dropout runs
    save_file(tensors, str(dir_ / "last.safetensors.tmp"))
    (dir_ / "last.safetensors.tmp").replace(dir_ / "last.safetensors")
    version, internal, gauss = random.getstate()
    info = {**info, "param_groups": opt["param_groups"], "python_rng": [version, list(internal), gauss]}
    (dir_ / "state.json").write_text(json.dumps(info, indent=1))


def read_state(dir_: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """The saved weights, optimizer state and progress (on the CPU), for load_state."""
    return load_file(str(dir_ / "last.safetensors")), json.loads((dir_ / "state.json").read_text())


def load_state(saved: tuple[dict[str, torch.Tensor], dict], model, optimizer) -> dict:
    """model, optimizer and the random number generators <- the state read_state read -> the progress it was saved
    with. ValueError if the saved weights do not fit the model."""
    tensors, info = saved
    model_sd = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    target = unique_state_dict(model)
    misfits = [k for k, t in target.items() if k not in model_sd or model_sd[k].shape != t.shape]
    if misfits or len(model_sd) != len(target):
        named = ", ".join(misfits[:3]) or "other tensors"
        raise ValueError(f"the saved weights have another shape than the model the flags ask for ({named}): resume "
                         "with the shape flags the run was started with")  # fmt: skip
    with torch.no_grad():
        for k, t in target.items():
            t.copy_(model_sd[k])
    state: dict = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, pid, name = k.split(".", 2)
            state.setdefault(int(pid), {})[name] = v
    optimizer.load_state_dict({"state": state, "param_groups": info["param_groups"]})
    restore_rng(tensors, info)
    return info


def restore_rng(tensors: dict[str, torch.Tensor], info: dict) -> None:
    """torch's and Python's random number generators <- the ones save_state saved (a state saved before they were
    kept has none: the run goes on with the generators as seeded)."""
    if "rng.torch" in tensors:
        torch.set_rng_state(tensors["rng.torch"])
    if "rng.cuda" in tensors and torch.cuda.is_available() and torch.cuda.is_initialized():  # a run on a GPU
        torch.cuda.set_rng_state(tensors["rng.cuda"])
    if isinstance(info.get("python_rng"), list):
        version, internal, gauss = info["python_rng"]
        random.setstate((version, tuple(internal), gauss))


def save_snapshot(dir_: Path, model, epoch: int, snapshots: list[str], keep: int) -> list[str]:
    """Writes the model's weights to dir_/epoch{epoch}.safetensors -> the names of the last `keep` snapshots, the
    only ones left in dir_ (--average-last tries their average at the end). keep 0 writes none (and removes any)."""
    snap = dir_ / f"epoch{epoch}.safetensors"
    if keep > 0:
        save_file({k: v.detach().cpu().contiguous() for k, v in unique_state_dict(model).items()}, str(snap))
    snapshots = (snapshots + [snap.name])[-keep:] if keep > 0 else []  # [-0:] would keep them all
    for old in dir_.glob("epoch*.safetensors"):
        if old.name not in snapshots:
            old.unlink()
    return snapshots


def average_snapshots(paths: list[Path]) -> dict[str, torch.Tensor]:
    """The mean of the snapshots' weights, in float32."""
    avg: dict[str, torch.Tensor] = {}
    for p in paths:
        for k, v in load_file(str(p)).items():
            avg[k] = avg.get(k, 0) + v.float() / len(paths)
    return avg


def load_grown(model: Transformer, start: Transformer) -> None:
    """model <- start's weights, where model may have more encoder layers than start: those, above start's, keep their
    initialisation but for the output projections of their attention and feed-forward, which are zeroed. In a pre-LN
    layer the residual then carries its input through unchanged, so model computes what start computes (and learns
    the new layers from there, as ReZero and Fixup start their residual branches at zero). Post-LN layers are not
    the identity at zero: the caller refuses them."""
    missing, unexpected = model.load_state_dict(start.state_dict(), strict=False)
    grown = tuple(f"encoder_layers.{i}." for i in range(start.config.n_encoder_layers, model.config.n_encoder_layers))
    if unexpected or any(not k.startswith(grown) for k in missing):
        raise ValueError(f"cannot grow {start.config} into {model.config}: {unexpected or missing}")
    with torch.no_grad():
        for layer in model.encoder_layers[start.config.n_encoder_layers :]:
            for linear in (layer.self_attn.out_proj, layer.ffn.w2):
                linear.weight.zero_()
                linear.bias.zero_()

"""Activations fused into tilemm.nn.Linear's epilogue: ``swap_linears(model, fuse_activations=True)``.

A swapped Linear with ``activation`` set runs ``tilemm.linear`` (its bias, and the activation,
in the product's pass; one ``tilemm::linear`` operator that Inductor sees into under
torch.compile). fuse_activations finds, in a swapped model:

- in an ``nn.Sequential`` (or a subclass that keeps its forward, the chain), a Linear followed by
  a known activation module (nn.ReLU, nn.GELU(approximate='none' or 'tanh'), nn.SiLU, and
  transformers' SiLUActivation, GELUActivation and GELUTanh): the Linear takes the activation, an
  ``nn.Identity`` takes the module's place;
- a gated MLP of transformers (LlamaMLP, MistralMLP, Qwen2MLP: ``down_proj(act_fn(gate_proj(x)) *
  up_proj(x))``): gate_proj takes act_fn, which becomes an nn.Identity. Under torch.compile the
  gate's activation is left to Inductor, which fuses it into the product with up_proj's output
  (a pass it makes anyway), where the epilogue would spend the product's tiles on its
  instructions and store the pre-activation a second time for the backward (an H200, a 4-layer
  Llama at 2048 tokens, bf16: the GPU's time a compiled training step 10.26 ms against 10.32,
  a prefill 1.91 against 1.92).

and every other swapped Linear runs tilemm.linear with no activation. A Linear the model holds
in more than one place (one module called twice, or also outside the pair) is not fused: its
other calls would take the activation too. ``restore_linears`` puts
each activation module back. A forward hook on a fused Linear sees the activated output.
"""
from __future__ import annotations

import torch

from tilemm.numerics.dtypes import torch_dtype_name
from tilemm.numerics.epilogue_math import check_activation
from tilemm.engine.epilogue_launch import config_for

# transformers' activation modules (ACT2FN's), by class name: transformers is no dependency
TRANSFORMERS_ACTIVATIONS = {"SiLUActivation": "silu", "GELUActivation": "gelu", "GELUTanh": "gelu_tanh",
                            "PytorchGELUTanh": "gelu_tanh"}
# transformers' MLPs whose forward is down_proj(act_fn(gate_proj(x)) * up_proj(x))
GATED_MLPS = ("LlamaMLP", "MistralMLP", "Qwen2MLP")
# a Linear's fused_from where it took no activation module: (holder, key, module, gated); a layer
# pickled by an earlier tilemm holds the first three (its gate then keeps the epilogue)
NOT_FUSED = (None, None, None, False)


def check_fused(kernel, out_dtype, activation, params: dict) -> None:
    """Refuse options tilemm.linear doesn't take (TypeError, ValueError), before any product."""
    check_activation(activation)
    if out_dtype is not None:
        raise TypeError("Linear: out_dtype is not taken with an activation (tilemm.linear computes in the "
                        "operands' dtype)")
    if kernel not in (None, "auto"):
        from tilemm.ladder import registry
        rung = registry.get(kernel)       # (ValueError naming the known kernels)
        if rung.backend not in ("triton", "library", "numpy"):    # (refused at the first forward before)
            raise ValueError(f"Linear: kernel={kernel!r} has no fused epilogue for activation={activation!r}: "
                             "epilogues run in tilemm's Triton program (name a Triton rung, e.g. "
                             "kernel='tensorcore') or in the library (kernel='cublas' or None)")
    config_for(torch.float16, params)     # (the program's tile parameters only)


def compiled_program(kernel, out_dtype, params: dict) -> tuple:
    """The input dtypes for which a Linear of these options runs tilemm::linear under torch.compile
    (the fused-epilogue program, which the compiled graph holds and Inductor schedules, or torch's
    operators, which Inductor compiles as torch's own Linear): float16 and bfloat16 where the
    kernel is a Triton rung that takes them and its parameters are the program's tiles, or where it
    is tilemm's default (the route by the default's table, shape by shape) with no parameters; with
    no out_dtype; () otherwise (the layer's usual op, tilemm::matmul)."""
    if out_dtype is not None:
        return ()
    if kernel in (None, "auto"):
        return () if params else (torch.float16, torch.bfloat16)
    from tilemm.ladder import registry
    rung = registry.get(kernel)
    if rung.backend != "triton":
        return ()
    try:
        config_for(torch.float16, params)
    except (TypeError, ValueError):
        return ()
    return tuple(dtype for dtype in (torch.float16, torch.bfloat16) if torch_dtype_name(dtype) in rung.dtypes)


def activation_of(module: torch.nn.Module) -> str | None:
    """The epilogue's name for a known activation module, or None."""
    kind = type(module)
    if kind is torch.nn.ReLU:
        return "relu"
    if kind is torch.nn.GELU:
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(module.approximate)
    if kind is torch.nn.SiLU:
        return "silu"
    return TRANSFORMERS_ACTIVATIONS.get(kind.__name__)     # (each of them computes the same by name)


def fuse_activations(model: torch.nn.Module, Linear: type, kernel, out_dtype, params: dict) -> list[str]:
    """Fuse model's known activations into the swapped Linears (of class Linear, tilemm.nn's)
    before them, and set every other swapped Linear to run tilemm.linear (see the module's
    docstring). Returns the names of the Linears that took an activation."""
    if out_dtype is not None:
        raise TypeError("swap_linears: out_dtype is not taken with fuse_activations=True")
    fused = []
    places = {}       # id of each module -> the places the model holds it in
    for _, module in model.named_modules(remove_duplicate=False):
        places[id(module)] = places.get(id(module), 0) + 1
    for name, module in list(model.named_modules()):
        pairs, gated = [], False
        if isinstance(module, torch.nn.Sequential) and type(module).forward is torch.nn.Sequential.forward:
            keys = list(module._modules)
            pairs = [(module, first, module, second) for first, second in zip(keys, keys[1:])]
        elif type(module).__name__ in GATED_MLPS and hasattr(module, "gate_proj") and hasattr(module, "act_fn"):
            pairs, gated = [(module, "gate_proj", module, "act_fn")], True
        for owner, linear_key, holder, activation_key in pairs:
            linear, act = owner._modules[linear_key], holder._modules.get(activation_key)
            activation = activation_of(act) if act is not None else None
            if (type(linear) is Linear and activation and linear.activation in (None, "identity")
                    and places[id(linear)] == 1):
                linear.configure(kernel=kernel, activation=activation, **params)
                linear.fused_from = (holder, activation_key, act, gated)
                holder._modules[activation_key] = torch.nn.Identity()
                fused.append(f"{name}.{linear_key}" if name else linear_key)
    for module in model.modules():
        if type(module) is Linear and not module.activation:
            module.configure(kernel=kernel, activation="identity", **params)
    return fused


def unfuse(linear: torch.nn.Module) -> None:
    """Put a fused Linear's activation module back in its place (restore_linears)."""
    holder, key, act = linear.__dict__.pop("fused_from", NOT_FUSED)[:3]     # (a layer pickled before `gated`: three)
    if holder is not None and isinstance(holder._modules.get(key), torch.nn.Identity):
        holder._modules[key] = act

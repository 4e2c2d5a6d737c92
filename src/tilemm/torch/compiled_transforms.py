"""tilemm's calls inside a torch.func transform that torch.compile traces.

The custom ops (torch.ops.tilemm.matmul, linear, matmul_epilogue, grouped_matmul) carry a fake,
autograd's backward and a vmap rule, but no forward-mode rule: torch gives such an op a zero
tangent, without a word, under jvp and jacfwd, and their fakes fail under grad. So while
torch.compile traces one of autograd's transforms, a call runs outside the graph (a graph break),
eagerly, where its autograd Function has every rule; under vmap the op's own rule holds.
"""
import torch
from torch._C._functorch import TransformType
from torch._functorch.pyfunctorch import retrieve_current_functorch_interpreter


def transformed() -> bool:
    """Whether the innermost torch.func transform is one of autograd's (grad, vjp, jvp, jacfwd, ...),
    not vmap."""
    if not torch._C._are_functorch_transforms_active():
        return False
    return retrieve_current_functorch_interpreter().key() != TransformType.Vmap


def run(function, *args, **kwargs):
    """function(*args, **kwargs)."""
    return function(*args, **kwargs)


# function(*args, **kwargs), which torch.compile runs eagerly, its inner frames untraced (made
# here, once: a graph break where a traced call reaches it): there tilemm's call takes its
# autograd Function, which has every transform's rule
outside_the_graph = torch.compiler.disable(run, recursive=True)


def eager_only(function_class):
    """function_class, a torch.autograd.Function, with its forward, backward and jvp never traced
    by Dynamo. Where torch.compile can't trace a torch.func transform, it runs the transform
    eagerly and may start compiling at any Python frame under it, such as a forward that launches
    a Triton program: Dynamo would trace Triton's launch itself (a program's kernel then reads as
    None). An eager call pays the guard's microsecond a step."""
    for name in ("forward", "backward", "jvp"):
        step = function_class.__dict__.get(name)
        if step is not None:
            setattr(function_class, name, staticmethod(torch.compiler.disable(step.__func__, recursive=True)))
    return function_class

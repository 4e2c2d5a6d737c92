"""How a replay makes a value of a recorded launch for a new call's operands (tilemm.engine.replay):
an operand itself, an operand's address (a view of it, which a program reads by its address
alone), a TMA descriptor over such a view. Each says which operand it reads, so that a replay
launched past Triton's runner (tilemm.engine.direct_replay) can work with addresses alone."""
from __future__ import annotations


class Whole:
    """make(operands, scratch) for a value that is operand `which` itself."""
    __slots__ = ("which",)
    delta = 0              # bytes from the operand's address

    def __init__(self, which: int):
        self.which = which

    def __call__(self, operands, scratch):
        return operands[self.which]


class Address:
    """Stands for a descriptor's base where that is a view of an operand: Triton reads nothing of
    it but its address, and a tensor view costs CPU time at every call."""
    __slots__ = ("address",)

    def __init__(self, address: int):
        self.address = address

    def data_ptr(self) -> int:
        return self.address


class OperandAddress:
    """make(operands, scratch) for a view of operand `which` that starts `delta` bytes into it, as
    its Address (as_int: the address itself, an int)."""
    __slots__ = ("which", "delta", "as_int")

    def __init__(self, which: int, delta: int, as_int: bool = False):
        self.which, self.delta, self.as_int = which, delta, as_int

    def __call__(self, operands, scratch):
        address = operands[self.which].data_ptr() + self.delta
        return address if self.as_int else Address(address)


class DescriptorMaker:
    """make(operands, scratch) for a TMA descriptor: the recorded one's fields (shape, strides,
    block: the very objects, which Triton's launcher and tilemm.engine.direct_launch compare by
    identity) over the base make_base gives."""
    __slots__ = ("kind", "fields", "make_base")

    def __init__(self, kind, fields: dict, make_base):
        self.kind, self.fields, self.make_base = kind, fields, make_base

    def __call__(self, operands, scratch):
        d = object.__new__(self.kind)
        d.__dict__.update(self.fields, base=self.make_base(operands, scratch))
        return d

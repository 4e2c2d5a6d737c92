"""The shared GPU machinery beneath the rungs: the device and stream guard (streams), launches past
Triton's Python layers, replay of repeated calls, workspaces, the backends that prepare a plan, and the
tensor-core programs and helpers several rungs share. Imports nothing from the ladder or above."""

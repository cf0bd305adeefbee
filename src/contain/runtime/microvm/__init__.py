"""The microVM backend: a QEMU microvm guest with contain's guest agent as its pid 1."""

__all__: list[str] = []

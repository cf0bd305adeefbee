"""The microVM backend: a QEMU ``-M microvm`` guest kernel between the workload and the host, with
contain's guest agent as its pid 1."""

__all__: list[str] = []

"""A bounded buffer for what a command prints: one host cannot exhaust the controller's memory.

The head and the tail are kept (where tools say what they are and where they say what went
wrong); the middle is dropped and the text says how much.
"""

from __future__ import annotations

# Per stream and command. The fact probe prints ~100 KiB on an 8-GPU host and the smoke
# cleanup at most a few MiB (result files and a log tail), so this only stops runaway output.
HEAD_BYTES = 4 << 20
TAIL_BYTES = 4 << 20


class Capped:
    def __init__(self, head: int | None = None, tail: int | None = None) -> None:
        self.head_limit = HEAD_BYTES if head is None else head
        self.tail_limit = TAIL_BYTES if tail is None else tail
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.head) + len(self.tail)

    def add(self, data: bytes) -> None:
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        extra = len(self.tail) - self.tail_limit
        if extra > 0:
            del self.tail[:extra]
            self.dropped += extra

    def text(self) -> str:
        head = bytes(self.head).decode("utf-8", "replace")
        tail = bytes(self.tail).decode("utf-8", "replace")
        if not self.dropped:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace")
        return (f"{head}\n[gpufleet: {self.dropped} bytes of output cut here; "
                f"kept the first {len(self.head)} and the last {len(self.tail)}]\n{tail}")

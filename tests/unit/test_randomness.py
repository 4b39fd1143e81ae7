"""Random ids come from the OS in blocks: never the same bytes twice, not even across fork."""

import os
import uuid

from gateway.randomness import random_bytes, random_hex, random_uuid4


def test_no_two_calls_share_bytes_across_blocks() -> None:
    seen = {random_bytes(16) for _ in range(3 * 4096 // 16)}
    assert len(seen) == 3 * 4096 // 16
    assert all(len(b) == 16 for b in seen)


def test_shapes() -> None:
    assert len(random_hex()) == 32 and int(random_hex(), 16) >= 0
    parsed = uuid.UUID(random_uuid4())
    assert parsed.version == 4 and str(parsed) == str(parsed).lower()


def test_a_forked_child_does_not_repeat_its_parent() -> None:
    random_bytes(16)  # the parent holds a partly used block
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, random_bytes(16))
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 16)
    assert child != random_bytes(16)

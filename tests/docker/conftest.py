"""Start the image test first.

tests/docker/test_image_build.py builds both images (up to half an hour on a fresh 2-core machine,
minutes later on). Under `pytest -n 2 --dist loadfile` one worker runs it while the other runs the
rest of the suite; started last, it would add its whole time to the run's. Moving its items to the
front of the collection (every worker collects alike, so the schedule stays consistent) makes it
the first file a worker takes.
"""

from __future__ import annotations

IMAGE_TEST = "test_image_build.py"


def pytest_collection_modifyitems(session, config, items):
    first = [item for item in items if item.path.name == IMAGE_TEST]
    if first and len(first) < len(items):
        items[:] = first + [item for item in items if item.path.name != IMAGE_TEST]

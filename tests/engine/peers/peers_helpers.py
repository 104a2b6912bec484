"""Shared builders of the peers' tests."""

from engine.metrics.live import LiveView


class RecordingView(LiveView):
    """A live view that shows nothing and keeps what it was asked to show: `statuses` (the live line) and `lines`."""

    def __init__(self):
        super().__init__(0, enabled=False)
        self.statuses, self.lines = [], []

    def status(self, text):
        self.statuses.append(text)

    def line(self, text):
        self.lines.append(text)

"""lfm-chat: the Textual application and its command line."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lfm-chat")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+source"

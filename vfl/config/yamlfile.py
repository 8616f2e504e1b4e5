"""Reading small YAML files safely: bounded size, no aliases (no alias bombs), one-line errors."""

from __future__ import annotations

import yaml

MAX_YAML_BYTES = 1 << 20


class _NoAliasLoader(yaml.SafeLoader):
    """safe_load without anchors/aliases: a party config never needs them, and an alias bomb cannot expand."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "YAML aliases (*name) are not allowed here", event.start_mark)
        return super().compose_node(parent, index)


def read_yaml(path: str, error: type[Exception], what: str = "file"):
    """The parsed YAML at path; `error` with a one-line message when it is missing, too big, binary or not YAML."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_YAML_BYTES + 1)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise error(f"{what} not found: {path}") from None
    except OSError as e:
        raise error(f"{what} {path} cannot be read: {e.strerror}") from None
    if len(raw) > MAX_YAML_BYTES:
        raise error(f"{what} {path} is larger than {MAX_YAML_BYTES} bytes: not a configuration")
    try:
        return yaml.load(raw, Loader=_NoAliasLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        raise error(f"{path}: not valid YAML: {' '.join(str(e).split())[:300]}") from None
    except RecursionError:
        raise error(f"{path}: not valid YAML: nested too deeply") from None

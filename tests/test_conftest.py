"""The fixtures module is loaded once: a second copy (imported as `conftest` and as `tests.conftest`) kept its own
list of temp dirs, which the session's clean-up (in the other copy) never removed."""

from __future__ import annotations

import sys

import pytest

from tests import conftest


def test_conftest_is_one_module() -> None:
    copies = [
        name
        for name, module in list(sys.modules.items())
        if getattr(module, "__file__", None) and module.__file__ == conftest.__file__
    ]
    assert copies == ["tests.conftest"], copies


def test_the_session_clean_up_empties_the_list_short_tmp_fills(request: pytest.FixtureRequest) -> None:
    plugins = [
        p for p in request.config.pluginmanager.get_plugins() if getattr(p, "__file__", None) == conftest.__file__
    ]
    assert plugins == [conftest]  # the module whose _remove_short_tmps runs at the end is the one tests import
    path = conftest.short_tmp("ct")
    assert path in conftest._SHORT_TMPS

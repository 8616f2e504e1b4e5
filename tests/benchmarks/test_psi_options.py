"""The PSI bench's id-count options: whole numbers >= 1, a bad one refused in one line naming it."""

import pytest

from benchmarks import psi


def test_id_counts_are_read_from_a_comma_separated_list():
    # Prepare / Execute
    counts = psi.id_counts("1000, 20,")

    # Assert
    assert counts == [1000, 20]
    assert psi.id_counts("") == []


@pytest.mark.parametrize("bad", ["0", "-5", "1e6", "ten"])
def test_an_id_count_below_one_or_not_whole_is_refused_naming_it(bad, capsys):
    # Prepare / Execute
    with pytest.raises(SystemExit) as stop:
        psi.main(["--reuse-ids", bad, "--sizes", "", "--stage-ids", "0", "--rank-ids", "0", "--verify-ids", "0"])

    # Assert: argparse's usage error, one line naming the value and the domain
    assert stop.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert repr(bad) in last and ">= 1" in last

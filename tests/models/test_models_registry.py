"""The model registry and the built-in layers: each bottom builds from the party's columns, the layers compute
their papers' formulas, wide_deep is unchanged, options are checked by the config, and resume keeps the model."""

from __future__ import annotations

import itertools

import pytest
import torch

from vfl.config.model_sections import BottomConfig, TopConfig
from vfl.config.schema import ConfigError, parse_config
from vfl.models.dcn_v2 import CrossLayer
from vfl.models.deepfm import fm_second_order
from vfl.models.inputs import InputSchema
from vfl.models.interaction import InteractionTop
from vfl.models.registry import BOTTOMS, build_bottom, build_top, check_model_spec, init_seed, model_spec
from vfl.models.user_module import ModelError
from vfl.models.wide_deep import WideDeepBottom

SCHEMA = InputSchema(("age", "income", "tenure"), ("city", "plan"), (40, 7))
SIZES = {"embedding_dim": 4, "hidden": [8], "cut_dim": 3}


@pytest.mark.parametrize(
    "bottom",
    [
        {"name": "wide_deep"},
        {"name": "deepfm"},
        {"name": "deepfm", "options": {"fm_numeric": False}},
        {"name": "dcn_v2"},
        {"name": "dcn_v2", "options": {"low_rank": 2, "structure": "stacked", "cross_layers": 1}},
        {"name": "dcn_v2", "hidden": []},
        {"name": "mlp"},
    ],
    ids=[
        "wide_deep",
        "deepfm",
        "deepfm-no-numeric-fm",
        "dcn_v2",
        "dcn_v2-low-rank-stacked",
        "dcn_v2-cross-only",
        "mlp",
    ],
)
def test_every_builtin_bottom_maps_a_batch_of_the_schema_to_its_cut_with_sparse_embeddings(bottom):
    # Prepare
    from vfl.training.lazy_adam import LazyAdam
    from vfl.training.optim import build_optimizer

    cfg = BottomConfig.model_validate({**SIZES, **bottom})
    batch = SCHEMA.dummy_batch(5)
    # Execute
    model = build_bottom(cfg, SCHEMA, 0, "leader")
    out = model(batch["numeric"], batch["numeric_missing"], batch["categorical"])
    out.sum().backward()
    # Assert: (rows, cut_dim), gradients reach the embedding table as sparse rows (the LazyAdam path)
    assert out.shape == (5, 3) and out.dtype == torch.float32
    sparse = [p for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()]
    assert sparse and all(p.grad is not None and p.grad.is_sparse for p in sparse)
    opt = build_optimizer(model, parse_config(_follower()).train)
    assert any(isinstance(o, LazyAdam) for o in opt.optimizers)


@pytest.mark.parametrize("name", ["wide_deep", "deepfm", "dcn_v2", "mlp"])
@pytest.mark.parametrize("options", [{}, {"low_rank": 3, "structure": "stacked"}, {"fm_numeric": False}])
def test_the_torch_free_parameter_count_of_preflight_is_the_built_models(name, options):
    # Prepare
    from vfl.config.model_options import BOTTOM_OPTIONS
    from vfl.models.param_count import bottom_parameters

    options = {k: v for k, v in options.items() if k in BOTTOM_OPTIONS[name].model_fields}
    cfg = BottomConfig.model_validate({**SIZES, "name": name, "options": options})
    # Execute
    model = build_bottom(cfg, SCHEMA, 0, "leader")
    embedding, dense = bottom_parameters(cfg, list(SCHEMA.vocab_sizes), SCHEMA.n_numeric)
    # Assert
    sparse = sum(p.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters())
    assert (embedding, embedding + dense) == (sparse, sum(p.numel() for p in model.parameters()))


def test_wide_deep_from_the_registry_is_todays_module_bit_for_bit():
    # Prepare / Execute: the registry's wide_deep and WideDeepBottom built as before, under the same seed
    cfg = BottomConfig.model_validate(SIZES)
    new = build_bottom(cfg, SCHEMA, 3, "follower0")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed(3, "follower0"))
        old = WideDeepBottom([40, 7], 3, 4, (8,), 3, 0.0)
    # Assert
    assert list(new.state_dict()) == list(old.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(new.state_dict().values(), old.state_dict().values()))


def test_the_fm_term_is_the_sum_over_pairs_of_inner_products():
    # Prepare
    v = torch.randn(6, 5, 3, dtype=torch.float64)
    # Execute
    fast = fm_second_order(v)
    # Assert: Rendle's O(fields x dim) identity equals the explicit sum over i < j
    slow = sum((v[:, i] * v[:, j]).sum(1) for i, j in itertools.combinations(range(5), 2))
    torch.testing.assert_close(fast.squeeze(1), slow)


@pytest.mark.parametrize("low_rank", [None, 2])
def test_a_cross_layer_is_x0_times_w_x_plus_b_plus_x(low_rank):
    # Prepare
    layer = CrossLayer(6, low_rank).double()
    x0, x = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64)
    # Execute
    out = layer(x0, x)
    # Assert: Eq. 1 with W full, or W = U V^T of rank r (Eq. 2)
    if low_rank is None:
        w, b = layer.w.weight, layer.w.bias
    else:
        w, b = layer.w[1].weight @ layer.w[0].weight, layer.w[1].bias
    torch.testing.assert_close(out, x0 * (x @ w.T + b) + x)
    assert low_rank is None or torch.linalg.matrix_rank(w) == low_rank


def test_the_interaction_top_adds_exactly_the_cross_party_pairs():
    # Prepare: three parties' cuts of widths 2, 3, 1
    top = InteractionTop((2, 3, 1), outputs=1, rank=4).double()
    z = torch.randn(7, 6, dtype=torch.float64)
    # Execute
    out = top(z)
    # Assert: linear term + sum over party pairs p < q of <P_p z_p, P_q z_q> (no pair within a party)
    parts = torch.split(z, [2, 3, 1], dim=1)
    s = [p(zp) for p, zp in zip(top.project, parts)]
    cross = sum((s[p] * s[q]).sum(1) for p, q in itertools.combinations(range(3), 2))
    torch.testing.assert_close(out, top.linear(z).squeeze(1) + cross)


def test_the_interaction_top_learns_a_cross_party_product_that_a_linear_top_cannot():
    # Prepare: y = 1 when the two parties' cut values have the same sign (an XOR of the parties)
    g = torch.Generator().manual_seed(0)
    z = torch.randn(2000, 2, generator=g)
    y = (z[:, 0] * z[:, 1] > 0).float()

    def fit(cfg: dict) -> float:
        from sklearn.metrics import roc_auc_score

        top = build_top(TopConfig.model_validate(cfg), (1, 1), 0)
        opt = torch.optim.Adam(top.parameters(), lr=0.05)
        for _ in range(200):
            opt.zero_grad()
            torch.nn.functional.binary_cross_entropy_with_logits(top(z), y).backward()
            opt.step()
        return roc_auc_score(y.numpy(), top(z).detach().numpy())

    # Execute / Assert
    assert fit({"name": "interaction"}) > 0.95
    assert fit({"name": "linear"}) < 0.6


@pytest.mark.parametrize(
    "bottom, needle",
    [
        (
            {"name": "dcn_v2", "options": {"cross_layer": 2}},
            "model.bottom.options: unknown key 'cross_layer' (did you mean 'cross_layers'?)",
        ),
        (
            {"name": "dcn_v2", "options": {"cross_layers": 0}},
            "model.bottom.options.cross_layers must be an integer in [1, 16]",
        ),
        ({"name": "dcn_v2", "options": {"structure": "stack"}}, "(did you mean 'stacked'?)"),
        ({"name": "deepfm", "options": {"low_rank": 2}}, "unknown key 'low_rank'; allowed: fm_numeric"),
        ({"name": "mlp", "import": "pkg.mod:Net"}, "model.bottom: name 'mlp' and import 'pkg.mod:Net' both given"),
        ({"import": "pkg.mod"}, "model.bottom.import must look like package.module:Class, got 'pkg.mod'"),
        ({"name": "fm"}, "model.bottom.name must be one of ['wide_deep', 'deepfm', 'dcn_v2', 'mlp'], got 'fm'"),
    ],
)
def test_model_options_are_checked_by_the_config_naming_key_value_and_domain(bottom, needle):
    # Prepare
    doc = _follower(bottom)
    # Execute
    with pytest.raises(ConfigError) as e:
        parse_config(doc)
    # Assert
    assert needle in str(e.value), str(e.value)


def test_a_user_module_takes_its_options_as_given_and_built_ins_fill_their_defaults():
    # Execute
    user = parse_config(_follower({"import": "pkg.mod:Net", "options": {"anything": [1, 2]}})).model.bottom
    dcn = parse_config(_follower({"name": "dcn_v2", "options": {"low_rank": 4}})).model.bottom
    # Assert
    assert user.import_ == "pkg.mod:Net" and user.options == {"anything": [1, 2]} and "name" not in user.spec
    assert dcn.options == {"cross_layers": 3, "low_rank": 4, "structure": "parallel"}
    assert set(BOTTOMS) == {"wide_deep", "deepfm", "dcn_v2", "mlp"}


def test_resuming_with_another_model_is_refused_in_one_line():
    # Prepare
    saved = model_spec(BottomConfig.model_validate({"name": "deepfm"}))
    other = model_spec(BottomConfig.model_validate({"name": "dcn_v2"}))
    # Execute / Assert: the same spec (or an older checkpoint without one) resumes; another is refused
    check_model_spec(saved, saved, "bottom of leader")
    check_model_spec(None, other, "bottom of leader")
    with pytest.raises(ModelError, match=r"trained as .*deepfm.*, but this config builds .*dcn_v2"):
        check_model_spec(saved, other, "bottom of leader")


def test_a_party_resumed_with_another_bottom_is_refused_before_any_weight_is_loaded(tmp_path, shards_small):
    # Prepare: a deepfm party's checkpoint state, and the same party configured with dcn_v2
    import torch as _torch

    from tests.support.party_processes import party_configs
    from vfl.config.schema import load_config
    from vfl.data.shards import PartyShard
    from vfl.training.party import BottomParty

    def party(bottom: dict) -> BottomParty:
        cfg = load_config(
            party_configs(str(tmp_path / bottom["name"]), str(shards_small), model={"bottom": bottom})["follower0"]
        )
        return BottomParty(cfg, PartyShard(cfg.data.path), _torch.device("cpu"))

    saved = party({"name": "deepfm", "embedding_dim": 4, "hidden": [8]}).state()
    other = party({"name": "dcn_v2", "embedding_dim": 4, "hidden": [8]})
    before = {k: v.clone() for k, v in other.model.state_dict().items()}
    # Execute / Assert: one line naming both models; the weights are untouched
    with pytest.raises(ModelError, match=r"bottom of follower0 was trained as .*deepfm.*this config builds .*dcn_v2"):
        other.load_state(saved)
    assert all(_torch.equal(v, other.model.state_dict()[k]) for k, v in before.items())
    assert saved["model_spec"] == model_spec(
        BottomConfig.model_validate({"name": "deepfm", "embedding_dim": 4, "hidden": [8]})
    )


def _follower(bottom: dict | None = None) -> dict:
    doc = {"role": "follower", "party": "f", "network": {"connect": "tcp://127.0.0.1:1"}, "data": {"path": "x"}}
    return {**doc, "model": {"bottom": bottom}} if bottom else doc

"""Models built empty and filled shard by shard hold exactly the weights a full load gives, on every layout."""

from __future__ import annotations

import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen2Config, Qwen2ForCausalLM

from hybridrl.config.loader import load_config
from hybridrl.models.loader import empty_causal_lm, empty_value_model, load_causal_lm, load_value_model
from hybridrl.models.reward_model import build_tiny_reward_model, empty_reward_model, load_reward_model
from hybridrl.models.weights import load_weights, materialize
from hybridrl.testing.launch import run_ranks
from tests.tiny_models import tiny

LAYOUTS = {
    "full_shard": ["actor_rollout_ref.actor.fsdp.sharding_strategy=FULL_SHARD"],
    "no_shard": ["actor_rollout_ref.actor.fsdp.sharding_strategy=NO_SHARD"],
    "cpu_offload": ["actor_rollout_ref.actor.fsdp.cpu_offload=true"],
    "megatron_tp2": [
        "actor_rollout_ref.actor.strategy=megatron",
        "actor_rollout_ref.actor.parallel_config.megatron.tp_size=2",
    ],
    "megatron_pp2": [
        "actor_rollout_ref.actor.strategy=megatron",
        "actor_rollout_ref.actor.parallel_config.megatron.pp_size=2",
    ],
}


def tied_model(directory: str) -> str:
    """A tiny Qwen2 that ties its input and output embeddings (as Qwen2.5-0.5B does)."""
    torch.manual_seed(1)
    config = Qwen2Config(
        vocab_size=96,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        tie_word_embeddings=True,
    )
    Qwen2ForCausalLM(config).save_pretrained(directory)
    return directory


def load_on_rank(rank: int, world_size: int, paths: dict[str, str], out_dir: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.factory import make_engine

    mesh = init_device_mesh("cpu", (world_size,))
    device = torch.device("cpu")
    for name, extra in LAYOUTS.items():
        if name == "megatron_pp2" and paths["model"] == paths.get("tied"):
            continue
        actor_cfg = load_config([f"resource_pool.pools.global_pool.GPU={world_size}", *extra]).actor_rollout_ref.actor
        for model_name, path in paths.items():
            if model_name == "tied" and name == "megatron_pp2":
                continue  # a tied model cannot be split into pipeline stages (refused with its own message)
            empty, weights = empty_causal_lm(path)
            engine = make_engine(empty, actor_cfg, mesh=mesh, device=device, train=True, weights=weights)
            state = {k: v.clone() for k, v in engine.full_state_dict().items()}
            streamed = dict(engine.iter_full_weights())
            tied = {"lm_head.weight"} if model_name == "tied" else set()
            assert streamed.keys() == state.keys() - tied, f"{name}: a tied weight is sent once"
            assert all(torch.equal(streamed[k], state[k]) for k in streamed), f"{name}: streamed weights differ"
            if rank == 0:
                save_file(state, f"{out_dir}/{model_name}_{name}.safetensors")


def test_sharded_loading_equals_a_full_load(tmp_path):
    paths = {"model": tiny(str(tmp_path / "tiny")), "tied": tied_model(str(tmp_path / "tied"))}
    run_ranks(load_on_rank, 2, paths, str(tmp_path))
    for model_name, path in paths.items():
        reference = load_causal_lm(path).state_dict()
        for name in LAYOUTS:
            if model_name == "tied" and name == "megatron_pp2":
                continue
            loaded = load_file(str(tmp_path / f"{model_name}_{name}.safetensors"))
            assert loaded.keys() == reference.keys(), name
            for key, tensor in reference.items():
                assert torch.equal(loaded[key], tensor), f"{model_name} {name}: {key} differs from a full load"


def test_empty_builds_equal_the_full_loaders_single_process(tmp_path):
    """Without a process group too, and for the roles whose heads are in no file: the critic's value head
    and a reward model's score head start exactly where the full loaders start them."""
    path = tiny(str(tmp_path / "tiny"))
    device = torch.device("cpu")

    model, weights = empty_causal_lm(path)
    load_weights(materialize(model, device), weights)
    reference = load_causal_lm(path)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reference.state_dict().values()))
    assert model.generation_config.eos_token_id == reference.generation_config.eos_token_id

    for init_std in (0.0, 0.5):
        critic, weights = empty_value_model(path, init_std=init_std, seed=7)
        load_weights(materialize(critic, device), weights)
        full = load_value_model(path, init_std=init_std, seed=7).state_dict()
        assert critic.state_dict().keys() == full.keys()
        assert all(torch.equal(critic.state_dict()[k], full[k]) for k in full), f"value model, std {init_std}"

    # A plain causal LM as a reward model: the score head is missing and initialised under the seed.
    for rm_path in (path, build_tiny_reward_model(tmp_path / "rm")):
        rm, _, weights = empty_reward_model(rm_path, seed=3)
        load_weights(materialize(rm, device), weights)
        full_rm, _ = load_reward_model(rm_path, seed=3)
        full_state = full_rm.state_dict()
        assert all(torch.equal(rm.state_dict()[k], full_state[k]) for k in full_state), rm_path


def test_a_directory_without_safetensors_names_the_fix(tmp_path):
    path = tiny(str(tmp_path / "tiny"))
    for file in (tmp_path / "tiny").glob("*.safetensors"):
        file.unlink()
    model, weights = empty_causal_lm(path)
    try:
        load_weights(materialize(model, torch.device("cpu")), weights)
    except FileNotFoundError as exc:
        assert "save_pretrained" in str(exc) and "safetensors" in str(exc)
    else:
        raise AssertionError("loading from a directory without weights must fail")

"""Tiny random models saved to disk, loaded through the same code path as a hub id or a local directory."""
from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from ddd import Eagle3Head, Generation, Target, encode_prompt, generate, load_target, new_eagle3_head, new_head
from ddd.head import EagleHead

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "the cat sat on the mat and the dog sat on the log",
    "one two three four five six seven eight nine ten",
    "def add(a, b): return a + b",
    "Translate to French: the house is red. La maison est rouge.",
] * 20


def tiny_tokenizer(directory: Path) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=160, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", bos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(directory)
    return fast


def save_tiny_model(directory: Path, family: str = "llama", seed: int = 0, max_positions: int = 256) -> Path:
    tokenizer = tiny_tokenizer(directory)
    common = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                  eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                  pad_token_id=tokenizer.pad_token_id, initializer_range=0.3, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**common)) if family == "llama" else Qwen2ForCausalLM(Qwen2Config(**common))
    model.save_pretrained(directory)
    return directory


PROMPTS = ["the cat sat", "one two three", "def add(a, b)", "five six", "La maison", "seven eight nine"]
# Prompts the fitted heads were not fitted on.
UNSEEN = ["seven cats", "Translate to French: the dog"]
# Tree settings every greedy losslessness test runs through: the papers' defaults, and shapes that stress
# the tree code (a hand-written static tree, a one-wide beam nine calls deep, DDD checking at every call).
TREE_SETTINGS = {
    "eagle": [{}, {"tree": [[0], [1], [0, 0], [0, 0, 0], [1, 0]]}],
    "eagle2": [{}, {"beam_width": 3, "draft_calls": 4, "total_tokens": 8}, {"beam_width": 1, "draft_calls": 9, "total_tokens": 10}],
    "ddd": [{}, {"check_steps": "all", "threshold": -0.05}, {"beam_width": 4, "max_draft_calls": 6, "check_steps": "2,4",
                                                            "total_tokens": 12}],
    # The cost rule cheap enough to go deep, and dear enough to stop at the first call.
    "cost": [{}, {"pin_costs": True, "draft_cost": 0.001, "verify_base": 0, "verify_cost": 0},
             {"beam_width": 3, "max_draft_calls": 6, "total_tokens": 8, "pin_costs": True, "draft_cost": 2,
              "verify_base": 1, "verify_cost": 0.5}],
}


@torch.no_grad()
def greedy_answers(target: Target, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts with the target's greedy answers, right-padded (batch, length), and which of positions
    2.. are real. Right padding leaves every real position's causal context untouched."""
    answers = []
    for prompt in prompts:
        ids = torch.tensor([encode_prompt(target, prompt)])
        answers.append(target.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=48,
                                             do_sample=False, min_new_tokens=48, pad_token_id=0)[0])
    length = max(len(a) for a in answers)
    seqs = torch.stack([torch.nn.functional.pad(a, (0, length - len(a))) for a in answers])
    return seqs, torch.stack([torch.arange(length) < len(a) for a in answers])[:, 2:]


def fit_head(target: Target, prompts: list[str] = PROMPTS, steps: int = 300, seed: int = 0) -> EagleHead:
    """A head fitted for a few seconds on the target's own greedy answers to `prompts`, so that drafts get
    accepted there and the tests exercise long accepted paths, not only the root."""
    torch.manual_seed(seed)
    model = target.model
    seqs, valid = greedy_answers(target, prompts)
    length = seqs.shape[1]
    with torch.no_grad():
        feats = model.model(input_ids=seqs).last_hidden_state
        next_probs = model.lm_head(feats[:, 1:-1]).softmax(-1)[valid]
    head = new_head(target, seed=seed).train().requires_grad_(True)
    embed = model.get_input_embeddings()
    opt = torch.optim.AdamW(head.parameters(), lr=1e-2)
    positions = torch.arange(length - 2)[None].expand(len(seqs), -1)
    for _ in range(steps):
        noisy = feats[:, :-2] + (torch.rand_like(feats[:, :-2]) - 0.5) * 0.1
        pred = head(embed(seqs[:, 1:-1]), noisy, positions)
        loss = torch.nn.functional.smooth_l1_loss(pred[valid], feats[:, 1:-1][valid])
        loss = loss + torch.nn.functional.cross_entropy(model.lm_head(pred[valid]), next_probs)
        opt.zero_grad()
        loss.backward()
        opt.step()
    head.name = "tiny-fitted"
    return head.eval().requires_grad_(False)


def fit_eagle3_head(target: Target, prompts: list[str] = PROMPTS, steps: int = 300, seed: int = 0,
                    draft_vocab: torch.Tensor | None = None, hidden: int | None = None) -> Eagle3Head:
    """An EAGLE-3 head fitted the same way, by cross-entropy only, at the first draft level and at the second
    (where it reads its own output), on features of the three hidden states 0, 1 and 2 (the tiny models have
    two layers: too few for the official choice). hidden: the head's own width (default: the target's)."""
    torch.manual_seed(seed)
    model = target.model
    seqs, valid = greedy_answers(target, prompts)
    head = new_eagle3_head(target, draft_vocab=draft_vocab, seed=seed, layers=(0, 1, 2), hidden=hidden)
    head = head.train().requires_grad_(True)
    with torch.no_grad():
        output = model.model(input_ids=seqs, output_hidden_states=head.hidden_state_ids)
        aux = head.target_features(output)
        # The target's next-token distribution after each position, over the head's draft vocabulary.
        probs = model.lm_head(output.last_hidden_state).softmax(-1)[..., head.draft_to_target()]
        probs = probs / probs.sum(-1, keepdim=True)
    embed = head.embedding(target)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-2)
    positions = torch.arange(seqs.shape[1] - 2)[None].expand(len(seqs), -1)
    for _ in range(steps):
        first = head(embed(seqs[:, 1:-1]), head.fuse(aux[:, :-2]), positions)
        second = head(embed(seqs[:, 2:-1]), first[:, :-1], positions[:, 1:])
        loss = torch.nn.functional.cross_entropy(head.logits(first)[valid], probs[:, 1:-1][valid])
        loss = loss + torch.nn.functional.cross_entropy(head.logits(second)[valid[:, 1:]], probs[:, 2:-1][valid[:, 1:]])
        opt.zero_grad()
        loss.backward()
        opt.step()
    head.name = "tiny-fitted-eagle3"
    return head.eval().requires_grad_(False)


def runs_equal_to_plain(target: Target, head, prompts: list[str], runs: list[tuple[str, dict]],
                        max_new_tokens: int) -> list[Generation]:
    """Each prompt decoded once plainly, then by every (method, settings) of `runs`: each greedy answer must be
    plain decoding's, token for token. Returns the speculative runs for further checks."""
    done = []
    for prompt in prompts:
        plain = generate(target, None, prompt, "plain", max_new_tokens=max_new_tokens)
        list(plain)
        for method, settings in runs:
            run = generate(target, head, prompt, method, max_new_tokens=max_new_tokens, **settings)
            list(run)
            assert run.token_ids == plain.token_ids, (prompt, method, settings)
            done.append(run)
    return done


def load_tiny(directory: Path) -> Target:
    return load_target(str(directory))


def write_broken_head(directory: Path, target: Target, kind: str) -> Path:
    """A head file for `target` (kind "eagle" or "eagle3") that lacks one weight of its MLP."""
    from safetensors.torch import save_file

    from ddd import save_head

    head = new_eagle3_head(target, layers=(0, 1, 2)) if kind == "eagle3" else new_head(target)
    save_head(head, directory)
    state = head.state_dict_official()
    state.pop("midlayer.mlp.down_proj.weight" if kind == "eagle3" else "layers.0.mlp.down_proj.weight")
    save_file({k: v.contiguous() for k, v in state.items()}, directory / "model.safetensors")
    return directory


# The app on the tiny model: the Run button's settings in the panel's order (max_new_tokens, temperature,
# top_p, seed, precision, then the tree settings: beam_width, draft_calls, total_tokens, max_draft_calls, check_steps,
# threshold, pin_costs, draft_cost, verify_base, verify_cost; then the cost column's switch, off).
RACE_SETTINGS = [24, 0.0, 1.0, 0, "float32", 4, 4, 20, 8, "3,5,7", -0.3, False, 0.05, 0.1, 0.04, False]
TREE_MODE = "verified + best dropped"


def race_frames(page, prompt: str, session, settings: list = RACE_SETTINGS) -> list[dict]:
    """Every update of one Run, each as {output name: value}."""
    return [page.ui.named(v) for v in page.runner.run_race(prompt, *settings, True, TREE_MODE, session)]


def race_stopped_once_started(page, session, prompt: str = "one two three") -> tuple[list[dict], list[str]]:
    """A long Run with Stop pressed as soon as every column streams: its updates and what Stop answered."""
    page.runner.stream_every_s = 0.0
    frames, answers = [], []
    for values in page.runner.run_race(prompt, 200, *RACE_SETTINGS[1:], True, TREE_MODE, session):
        frames.append(page.ui.named(values))
        if "running" in str(frames[-1].get("cnt_ddd", "")) and not session.stop_requested:
            answers.append(page.runner.request_stop(session))
    return frames, answers


def message_of(out: dict) -> str:
    value = out.get("message", "")
    return value.get("value", "") if isinstance(value, dict) else str(value)


def record_tiny_race(target: Target, head, prompt: str = "one two three"):
    """A race recorded the way `python app.py --record-examples` records the shipped ones, with a tree the
    tiny model fills (four levels, twenty verified tokens, DDD checking at three, five and seven calls)."""
    from explorer.examples import record_race
    from explorer.models import ModelConfig, Models

    models = Models(ModelConfig(dtype=target.precision))
    models.install(target, head)
    return record_race(models, prompt, "tiny example", max_new_tokens=32,
                       changes=dict(beam_width=4, draft_calls=4, total_tokens=20, check_steps="3,5,7"))


def render_everything(race) -> int:
    """Draw every view of every step of `race`, checking each shows something; the number of steps drawn."""
    from components.race import COLUMN_METHODS
    from components.views import race_views, step_view

    views = race_views(race)
    assert views["timeline"].data and len(views["summary"]) == len(race.methods)
    for method in race.columns():
        assert views["columns"][COLUMN_METHODS.index(method)].count('class="step') >= 1
    steps = views["steps"]
    for index in range(steps):
        view = step_view(race, index)
        for tree in view.trees.values():
            assert tree.layout.title.text or tree.layout.annotations
        assert view.narration and view.depth.data
        assert 'class="step cur"' in view.texts["ddd"] or index >= len(race.traces["ddd"].steps)
    return steps


def hub_snapshot(hf_home: Path, repo_id: str) -> Path:
    """The snapshot folder a download of `repo_id` would fill in the Hugging Face cache under `hf_home`
    (save a model, tokenizer or head into it; HF_HOME=hf_home with HF_HUB_OFFLINE=1 then finds it)."""
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return repo / "snapshots" / commit

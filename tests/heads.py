"""What the EAGLE-3 head tests share: the tiny models' feature layers, and a head's logits on fixed inputs."""
import torch

LAYERS = (0, 1, 2)  # the tiny models have two layers: too few for the official choice


def sample_inputs(head, n=5):
    torch.manual_seed(0)
    hidden = head.config.hidden_size
    return torch.randn(1, n, hidden), torch.randn(1, n, head.feature_size), torch.arange(n)[None]


def outputs(head):
    embeds, aux, positions = sample_inputs(head)
    return head.logits(head(embeds, head.fuse(aux), positions))

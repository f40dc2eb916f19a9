"""Actor-critic reinforcement-learning nets, written here over ``torch.nn``.

The batch is a rollout of observations; each forward returns ``(policy, value)`` and the loss
is the algorithm's policy-gradient + value + entropy objective, with the actions, advantages and
returns a rollout would have produced drawn at random.
"""

from __future__ import annotations

from gpucast.surroundings import Data, Loop
from gpucast.zoo import register
from gpucast.zoo.base import Workload, WorkloadSpec, host_read


def _actor_critic(obs_dim: int, actions: int, continuous: bool, hidden=(64, 64)):
    """Separate policy and value MLPs with tanh (the Stable-Baselines3 default ``MlpPolicy``);
    a discrete policy outputs logits, a continuous one a Gaussian mean and a learned log-std."""
    import torch
    import torch.nn as nn

    def mlp(out):
        sizes = (obs_dim, *hidden)
        layers = [m for a, b in zip(sizes, sizes[1:]) for m in (nn.Linear(a, b), nn.Tanh())]
        return nn.Sequential(*layers, nn.Linear(sizes[-1], out))

    class ActorCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.pi, self.vf = mlp(actions), mlp(1)
            self.log_std = nn.Parameter(torch.zeros(actions)) if continuous else None

        def forward(self, obs):
            policy = self.pi(obs)
            if self.log_std is not None:
                policy = (policy, self.log_std.expand_as(policy))
            return policy, self.vf(obs).squeeze(-1)

    return ActorCritic()


def _a3c_lstm(spec: WorkloadSpec, actions: int = 6, hidden: int = 256):
    """The universe-starter-agent / pytorch-a3c net (Mnih et al. 2016, A3C): four 3x3 stride-2
    convs of 32 filters with ELU on a 1x42x42 frame, an LSTM cell of 256, linear policy and
    value heads. As in A3C, a rollout is one environment's frames, stepped one at a time."""
    import torch
    import torch.nn as nn

    c, h, w = spec.input_shape
    for _ in range(4):
        h, w = (h - 1) // 2 + 1, (w - 1) // 2 + 1

    class A3C(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.Sequential(*[m for i in range(4)
                                         for m in (nn.Conv2d(c if i == 0 else 32, 32, 3, 2, 1),
                                                   nn.ELU())], nn.Flatten())
            self.lstm = nn.LSTMCell(32 * h * w, hidden)
            self.actor, self.critic = nn.Linear(hidden, actions), nn.Linear(hidden, 1)

        def forward(self, frames):  # (T, C, H, W): T steps of one environment
            hx = cx = torch.zeros(1, hidden, device=frames.device, dtype=frames.dtype)
            states = []
            for t in range(frames.shape[0]):
                hx, cx = self.lstm(self.convs(frames[t:t + 1]), (hx, cx))
                states.append(hx)
            s = torch.cat(states)
            return self.actor(s), self.critic(s).squeeze(-1)

    return A3C()


def _obs(spec: WorkloadSpec, batch_size: int):
    import torch

    return (torch.randn(batch_size, *spec.input_shape),)


def _log_prob_entropy(policy):
    """Log-probability of random actions and the entropy, for logits or (mean, log_std).
    Argument validation is off: it reads tensor values, which the meta device has not."""
    import torch
    from torch.distributions import Categorical, Normal

    if isinstance(policy, tuple):
        dist = Normal(policy[0].float(), policy[1].float().exp(), validate_args=False)
        act = torch.randn(policy[0].shape, device=policy[0].device)
        return dist.log_prob(act).sum(-1), dist.entropy().sum(-1)
    dist = Categorical(logits=policy.float(), validate_args=False)
    act = torch.randint(0, policy.shape[-1], policy.shape[:-1], device=policy.device)
    return dist.log_prob(act), dist.entropy()


def _a2c_loss(output, inputs, vf_coef=0.5, ent_coef=0.01):
    """A2C / A3C: -(log pi(a|s) * advantage) + vf_coef * (V - R)^2 - ent_coef * entropy."""
    import torch
    import torch.nn.functional as F

    policy, value = output
    logp, entropy = _log_prob_entropy(policy)
    adv, ret = torch.randn_like(logp), torch.randn_like(logp)
    return (-(logp * adv).mean() + vf_coef * F.mse_loss(value.float(), ret)
            - ent_coef * entropy.mean())


def _ppo_loss(output, inputs, clip=0.2, vf_coef=0.5, ent_coef=0.0):
    """PPO (Schulman et al. 2017) clipped surrogate + value loss - entropy bonus."""
    import torch
    import torch.nn.functional as F

    policy, value = output
    logp, entropy = _log_prob_entropy(policy)
    adv, ret, old_logp = (torch.randn_like(logp) for _ in range(3))
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    return (-surrogate.mean() + vf_coef * F.mse_loss(value.float(), ret)
            - ent_coef * entropy.mean())


register(Workload(
    name="a2c-mlp", family="rl", source="gpucast",
    description="A2C (Mnih et al. 2016) actor-critic MLP 64-64, CartPole 4-d obs, 2 actions, "
                "16 envs x 5 steps",
    model_fn=lambda spec: _actor_critic(spec.input_shape[0], 2, continuous=False),
    input_fn=_obs, loss_fn=_a2c_loss,
    default_batch_size=80, default_input_shape=(4,), tags=("actor-critic",),
))

register(Workload(
    name="ppo-mlp", family="rl", source="gpucast",
    description="PPO (Schulman et al. 2017) Gaussian actor-critic MLP 64-64, HalfCheetah 17-d obs, "
                "6-d actions, minibatch 64",
    model_fn=lambda spec: _actor_critic(spec.input_shape[0], 6, continuous=True),
    input_fn=_obs, loss_fn=_ppo_loss,
    default_batch_size=64, default_input_shape=(17,), tags=("actor-critic",),
))

register(Workload(
    name="a3c-atari", family="rl", source="gpucast",
    description="A3C universe-starter net (Mnih et al. 2016): 4x conv32 on 1x42x42 + LSTM 256, "
                "Pong 6 actions, 20-step rollout",
    model_fn=_a3c_lstm, input_fn=_obs, loss_fn=_a2c_loss,
    default_batch_size=20, default_input_shape=(1, 42, 42), tags=("actor-critic", "atari"),
))


# --- dgriff777/rl_a3c_pytorch (the A3C that Gavel runs: workloads/pytorch/rl) ----------------------
A3C_GAMMA, A3C_TAU, A3C_ENTROPY = 0.99, 1.00, 0.01   # main.py --gamma, --tau; train.py's 0.01


def _a3c_dgriff(spec: WorkloadSpec, actions: int = 6):
    """dgriff777's A3Clstm (model.py) on 1x80x80 frames (environment.py's process_frame): conv
    32 5x5 pad 2, conv 32 5x5 pad 1, conv 64 4x4 pad 1, conv 64 3x3 pad 1, each followed by a
    2x2 max-pool and ReLU (80 -> 40 -> 19 -> 9 -> 4: 64x4x4 = 1024 features), LSTMCell(1024, 512),
    linear critic (1) and actor (Pong's 6 actions).

    ``forward`` is one rollout as train.py runs it (``player.action_train()`` per frame): for each
    of the T frames, the model on that frame alone, softmax, log-softmax, entropy, an action
    drawn by ``multinomial`` and its log-probability gathered, then ``action.cpu().numpy()`` for
    ``env.step``: the host waits for the GPU once per frame (:func:`host_read`). Then one more
    forward on the last state for the bootstrap value ``R`` (detached). Returns the per-frame
    values, log-probabilities, entropies and R for :func:`_a3c_gae_loss`."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    c = spec.input_shape[0]

    class A3Clstm(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(c, 32, 5, stride=1, padding=2)
            self.conv2 = nn.Conv2d(32, 32, 5, stride=1, padding=1)
            self.conv3 = nn.Conv2d(32, 64, 4, stride=1, padding=1)
            self.conv4 = nn.Conv2d(64, 64, 3, stride=1, padding=1)
            self.lstm = nn.LSTMCell(1024, 512)
            self.critic_linear = nn.Linear(512, 1)
            self.actor_linear = nn.Linear(512, actions)

        def step(self, x, hx, cx):
            for conv in (self.conv1, self.conv2, self.conv3, self.conv4):
                x = F.relu(F.max_pool2d(conv(x), kernel_size=2, stride=2))
            hx, cx = self.lstm(x.view(x.size(0), -1), (hx, cx))
            return self.critic_linear(hx), self.actor_linear(hx), hx, cx

        def forward(self, frames):  # (T, C, 80, 80): one rollout of one environment
            hx = cx = torch.zeros(1, 512, device=frames.device, dtype=frames.dtype)
            values, log_probs, entropies = [], [], []
            for t in range(frames.shape[0]):
                value, logit, hx, cx = self.step(frames[t:t + 1], hx, cx)
                prob = F.softmax(logit, dim=1)
                log_prob = F.log_softmax(logit, dim=1)
                entropies.append(-(log_prob * prob).sum(1))
                action = prob.multinomial(1).detach()
                log_probs.append(log_prob.gather(1, action))
                host_read(action)            # env.step(action.cpu().numpy())
                values.append(value)
            boot, _, _, _ = self.step(frames[-1:], hx, cx)   # R = value.data (not done)
            return values, log_probs, entropies, boot.detach()

    return A3Clstm()


def _a3c_gae_loss(output, inputs):
    """train.py's loss: the returns and generalised advantages computed backwards over the
    rollout one step at a time in Python on 1x1 GPU tensors (rewards are host floats), then
    ``policy_loss + 0.5 * value_loss`` (made 0-dim here; the script's is 1x1)."""
    values, log_probs, entropies, R = output
    values = values + [R]
    gae = R.new_zeros(1, 1)
    policy_loss = value_loss = 0.0
    reward = 0.0  # the clipped reward of each step: a host float
    for i in reversed(range(len(log_probs))):
        R = A3C_GAMMA * R + reward
        advantage = R - values[i]
        value_loss = value_loss + 0.5 * advantage.pow(2)
        delta_t = reward + A3C_GAMMA * values[i + 1].detach() - values[i].detach()
        gae = gae * A3C_GAMMA * A3C_TAU + delta_t
        policy_loss = policy_loss - log_probs[i] * gae - A3C_ENTROPY * entropies[i]
    return (policy_loss + 0.5 * value_loss).squeeze()


register(Workload(
    name="a3c-atari-80", family="rl", source="gpucast",
    description="A3C (dgriff777/rl_a3c_pytorch A3Clstm): 4 conv+max-pool on 1x80x80 + LSTMCell 512, "
                "Pong 6 actions, 20-frame rollout with a host read of each action",
    model_fn=_a3c_dgriff, input_fn=_obs, loss_fn=_a3c_gae_loss,
    default_batch_size=20, default_input_shape=(1, 80, 80), tags=("actor-critic", "atari"),
    # train.py: Pong stepped in the process, one environment step per frame; per iteration 20
    # action reads (in the graph, where the host waits) and 16 param.grad.cpu() copies
    # (ensure_shared_grads) as .item()-like host reads; "GPU %d finished step %d" every 100.
    data=Data(source="environment", num_workers=0, pin_memory=False, non_blocking=False),
    loop=Loop(item_calls=36, progress_bar=False, log_every=100, cudnn_benchmark=False),
    script="dgriff777/rl_a3c_pytorch train.py (Gavel's workloads/pytorch/rl): rollout of "
           "--num-steps 20, shared Adam on the CPU model",
))

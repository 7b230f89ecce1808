"""The steady state of one engine under Poisson arrivals at a rate (open loop): what a plan's instance serves.

A benchmark at a fixed concurrency is a closed loop (roofline.steady_state_curve): B requests always in flight,
the others' prompts arriving at X (B-1)/B. A deployment sees arrivals at rate lambda whatever is in flight, and
the number running varies about its mean. At rate lambda (per ms), with the roofline's step costs:

    D(b)   decode step of b sequences (context ISL + OSL/2)
    Delta  what one prompt adds to a step that runs anyway (its compute, the weights already read)
    rho  = lambda Delta                   time share of prompts
    n    = lambda (OSL-1) TPOT            sequences decoding (Little's law on the decode phase)

Steps. An iteration takes the prompt tokens waiting, up to the token budget beside the decoders: C = (budget -
n) / ISL prompts. With Q prompts waiting at its start it runs x = min(Q, C) of them in tau(Q) = D(n) + Delta x,
while Poisson(lambda tau) more arrive: Q' = Q - x + Poisson(lambda tau(Q)), a Markov chain solved for its
stationary law pi on a grid of Q (`_step_chains`). Its mean step is D / (1 - rho).

TPOT. A request's mean gap averages the steps its tokens see; a step of more sequences (longer by slope each) gives
more tokens, so the mean over tokens exceeds the mean step by slope Var(N) / N (N the sequences decoding, whose
variance holds the Poisson count and the common slow-down all of them share: Var(N) = n + (lambda (OSL-1))^2 x
Var(TPOT)):

    TPOT = (D(N) + slope Var(N) / N) / (1 - rho),   lambda (OSL-1) TPOT = N + slope Var(N) / D(N)

Its spread: the OSL-1 steps share time with every request whose decode phase overlaps (slope x the steps shared)
and carry the prompts arriving meanwhile (Delta each): a sum over a Poisson process, variance lambda S (2/3
(slope m)^2 + Delta^2 + slope m Delta), stretched by what its own extra time lets in (1 / (1 - rho - lambda m
slope)^2); Gamma-shaped.

TTFT. An arrival comes during a step (length-biased by tau), behind the prompts left over from it and those that
arrived before it in it (V); its prompt ends in the j-th next step, j = ceil((V + 1) / C), after j - 1 full steps
(D + Delta C); the last one also carries what arrived behind it, up to C. With nothing ahead and nothing decoding
(probability exp(-n)) the engine is idle and the prompt runs alone at once. Where the running limit K binds, the
wait for a sequence slot adds to it: the requests in the engine a birth-death chain whose departures are the closed
loop's throughput at N in flight (`_slots`), P(W > t) = P(wait) exp(-(X(K) - lambda) t). The quantile is taken over
the atoms of that mixture.

ITL, one gap: D(1 + N) + Delta x(Q), N the others decoding (negative binomial, Var(N)), Q from pi.

`benchmarks/model_vs_sim.py` measures all four metrics against the simulator.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import splu, spsolve
from scipy.special import betainc, gammaincc, gammaln
from scipy.stats import betabinom, binom, gamma, nbinom, poisson

from planner.perf.roofline import (
    COMPUTE_BOUND_TOKENS,
    DEFAULT_TOKEN_BUDGET,
    Efficiency,
    EngineShape,
    SteadyState,
    closed_loop_throughput,
    fixed_ms,
    step_ms,
)

SLOT_PERCENTILE = 99.0  # a point's batch: the running count's P99 (fewer than 1% of arrivals wait for a slot)
MAX_STATES = 1024  # grid points of the step chain; a queue that needs more is beyond what the engine serves
GAP_GRID = 160  # batch sizes at which the law of one gap is tabulated (a step moves by slope x spacing / 2 at most)
TAIL = 1e-9  # probability left out of Poisson sums and of the chain's grid
FORGOTTEN = 1e-9  # a chain has forgotten its start when what is left of a deviation is below this share of x's scale
DENSE_STATES = 160  # chains of up to this many states step as dense matrices
CACHE_SIZE = 4096  # open-loop solves kept (open_loop_states)
PROBE_LAGS = 48  # lags stepped before the infinite sums are taken (where the chain has forgotten by then)
TAIL_SHARE = 0.01  # a geometric tail is summed in closed form once it is under this share of the sum
ATOM_FLOOR = 1e-12  # an atom of TTFT's law lighter than this share of the whole is left out (its mass ~1e-9 in all)
_SOLVED: OrderedDict[str, tuple[list[SteadyState], list[SteadyState]]] = OrderedDict()
_U_NODES, _U_WEIGHTS = np.polynomial.legendre.leggauss(4)
_U_NODES, _U_WEIGHTS = (_U_NODES + 1) / 2, _U_WEIGHTS / 2  # Gauss-Legendre on [0, 1]


def _erlang_c(servers, offered):
    """Probability that an arrival waits in an M/M/K queue of K servers offered `offered` Erlangs (1 where a >= K)."""
    k, a = np.asarray(servers, dtype=float), np.asarray(offered, dtype=float)
    stable = a < k
    a_safe = np.where(stable, np.maximum(a, 1e-300), 1.0)
    blocking = poisson.pmf(k, a_safe) / np.maximum(poisson.cdf(k, a_safe), 1e-300)
    wait = k * blocking / np.maximum(k - a_safe * (1.0 - blocking), 1e-300)
    return np.where(stable, np.clip(wait, 0.0, 1.0), 1.0)


def _slots(shape: EngineShape, eff: Efficiency, isl: int, osl: int, rate, limit: int):
    """The wait for one of `limit` sequence slots, with the requests in the engine a birth-death chain: arrivals at
    lambda, departures at X(N), the closed loop's throughput at N in flight (its flow-equivalent server: when more
    run, each runs slower, and all of them together). pi(N) ~ prod_{i <= N} lambda / X(i) up to the limit K, then
    geometric with ratio lambda / X(K) for the requests waiting. Returns, per rate, the probability that an arrival
    waits (PASTA: pi(N >= K)), the rate (per ms) at which a wait ends, X(K) - lambda (exponential waits; <= 0
    where the engine cannot keep up), and the batch that holds SLOT_PERCENTILE of the time."""
    throughput = closed_loop_throughput(shape, eff, isl, osl, np.arange(1, limit + 1), limit)
    drain = throughput[-1] - rate
    ratio = rate[:, None] / throughput[None, :]  # rates x N = 1..K
    log_pi = np.concatenate([np.zeros((len(rate), 1)), np.cumsum(np.log(np.maximum(ratio, 1e-300)), axis=1)], axis=1)
    top = log_pi.max(axis=1, keepdims=True)
    pi = np.exp(log_pi - top)  # N = 0..K
    stable = drain > 0
    queue = np.where(stable, pi[:, -1] / np.where(stable, 1 - ratio[:, -1], 1.0), np.inf)  # N >= K, all of it
    total = np.where(stable, pi[:, :-1].sum(axis=1) + queue, 1.0)
    waits = np.where(stable, queue / total, 1.0)
    below = np.cumsum(pi[:, :-1], axis=1) / total[:, None]
    needed = np.array([min(int(np.searchsorted(b, SLOT_PERCENTILE / 100)), limit) for b in below])
    return waits, drain, needed.astype(float)


def _poisson_pmf(k, mean):
    """Poisson probabilities (scipy.special directly: the chain asks for many small tables)."""
    mean = np.maximum(mean, 1e-300)
    return np.exp(k * np.log(mean) - mean - gammaln(k + 1.0))


def _count_law(mean, var):
    """Negative binomial (scipy's n, p) of this mean and variance; Poisson where the variance is not above it."""
    mean = np.maximum(np.asarray(mean, dtype=float), 1e-300)
    extra = np.maximum(np.asarray(var, dtype=float) - mean, mean * 1e-9)
    size = mean**2 / extra
    return size, size / (size + mean)


def _count_sf(limit, mean, var):
    """P(N >= limit) for the requests in the engine (negative binomial)."""
    size, prob = _count_law(np.where(np.isfinite(mean), mean, 1.0), np.where(np.isfinite(var), var, 1.0))
    return np.where(np.isfinite(mean), nbinom.sf(limit - 1, size, prob), 1.0)


def _count_ppf(q, mean, var):
    size, prob = _count_law(np.where(np.isfinite(mean), mean, 1.0), np.where(np.isfinite(var), var, 1.0))
    return np.where(np.isfinite(mean), nbinom.ppf(q, size, prob), np.inf)


def _bisect(survival, target, low, high, iterations: int = 80):
    """The x with survival(x) = target, for a survival function falling in x, bisected on arrays."""
    for _ in range(iterations):
        middle = (low + high) / 2
        above = survival(middle) > target
        low, high = np.where(above, middle, low), np.where(above, high, middle)
    return (low + high) / 2


def _gamma_ppf(mean, var, q: float):
    spread = (mean > 0) & (var > 0) & np.isfinite(mean) & np.isfinite(var)
    m, v = np.where(spread, mean, 1.0), np.where(spread, var, 1.0)
    return np.where(spread, gamma.ppf(q, m * m / v, scale=v / m), mean)


def _token_mean(decode, rate, m: float, u, rho, slope, batch_var, ahead, start, ok):
    """The mean gap over tokens, T = E[N tau] / E[N] over steps (N the sequences a step decodes, tau its length):

        E[tau] = D(N) / (1 - rho),   Cov(N, tau) = (slope Var(N) + rho E[tau] ahead) / (1 - rho)
        T = E[tau] + Cov(N, tau) / N,   lambda m T = N + Cov(N, tau) / E[tau]   (Little's law, time-averaged)

    (steps that carry prompts hold `ahead` more sequences than a prompt's arrival sees). With E[tau] and Cov held,
    the second equation times N is a quadratic, N^2 - (lambda m E[tau] - Cov / E[tau]) N - lambda m Cov = 0, whose
    positive root is the next N (a fixed-point step on N itself diverges where N is small and Cov / N large); D(N)
    moves E[tau] by slope / (1 - rho) per sequence, a contraction where lambda m slope < 1 - rho (damped by it).
    Returns (N, T, the time-averaged N, ok: `ok` where the solution settled)."""
    safe_u = np.where(ok, u, 1.0)
    contraction = np.clip(np.where(ok, rate * m * slope / safe_u, 0.0), 0.0, 0.95)
    batch = np.maximum(start, 1e-9)
    settled = np.zeros(len(rate), dtype=bool)
    for _ in range(80):
        e_tau = decode(batch) / safe_u
        cov = (slope * batch_var + rho * e_tau * ahead) / safe_u
        tpot = e_tau + cov / np.maximum(batch, 1e-9)
        linear = rate * m * e_tau - cov / e_tau
        new = np.maximum((linear + np.sqrt(linear**2 + 4 * rate * m * cov)) / 2, 1e-9)
        settled = np.isclose(new, batch, rtol=1e-8, atol=1e-8)
        if np.all(settled | ~ok):
            break
        # a settled point stays put: its figures never depend on the other points' iterations
        batch = np.where(settled, batch, np.maximum(batch + (new - batch) / (1.0 - contraction), 1e-9))
    ok = ok & settled & np.isfinite(tpot)
    return batch, np.where(ok, tpot, np.inf), rate * m * np.where(ok, tpot, 0.0), ok


def _grid_size(rate, decode, delta, per_step) -> np.ndarray:
    """Grid points per prompt and the number of points the step chain needs (0: the queue of prompts does not
    settle, or needs more than MAX_STATES)."""
    full = decode + delta * per_step  # a step that runs C prompts
    arriving = rate * full
    drift = per_step - arriving  # prompts a backlogged step removes, net
    settled = drift > 0
    per_prompt = np.where(per_step < 2, 4.0, np.where(per_step < 4, 2.0, 1.0))
    # the backlog's tail falls as exp(-theta q), theta = 2 drift / variance (a random walk's); cover e^-18 of it
    theta = np.where(settled, 2 * drift / np.maximum(arriving, 1e-300), 1.0)
    top = per_step + poisson.ppf(1 - TAIL, np.maximum(arriving, 1e-300)) + 18.0 / theta
    states = np.ceil(top * per_prompt) + 2
    return per_prompt, np.where(settled & (states <= MAX_STATES), states, 0).astype(int)


def _transitions(lam: float, decode: float, delta: float, per_step: float, per_prompt: float, size: int):
    """The step chain of one point on the grid q = i / per_prompt: (P, q, x), P[i, j] the probability that a step
    begun with q_i prompts waiting leaves q_j (row-stochastic, sparse; Poisson arrivals during the step split
    between the two grid points around where they land, the grid's end holding the tail), x the prompts each
    state's step runs."""
    q = np.arange(size) / per_prompt
    x = np.minimum(q, per_step)
    tau = decode + delta * x
    most = lam * tau[-1]
    arrivals = np.arange(int(most + 12 * np.sqrt(most) + 12) + 1)
    weight = _poisson_pmf(arrivals[None, :], lam * tau[:, None])  # states x arrivals
    weight /= weight.sum(axis=1, keepdims=True)  # each row a law (the grid's end holds the tail)
    target = ((q - x)[:, None] + arrivals[None, :]) * per_prompt
    low = np.floor(target).astype(int)
    frac = target - low
    source = np.broadcast_to(np.arange(size)[:, None], low.shape).ravel()
    rows, cols, values = [], [], []
    for dest, share in ((np.minimum(low, size - 1), 1 - frac), (np.minimum(low + 1, size - 1), frac)):
        rows.append(source)
        cols.append(dest.ravel())
        values.append((weight * share).ravel())
    matrix = sparse.coo_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))), shape=(size, size))
    return matrix.tocsr(), q, x


def _step_chains(rate, decode, delta: float, per_step, per_prompt, states) -> list:
    """The stationary law of Q, the prompts waiting at a step's start (module docstring), for each point (arrays
    over points). Returns, per point, (q, x, pi, P): the grid, the prompts each state's step runs, the law, the
    transition matrix (`_transitions`).

    pi (P - I) = 0 with sum(pi) = 1: the balance equations (P^T - I) pi = 0, the one of Q = 0 replaced by
    pi(0) = 1, then normalized. P is banded (a step moves Q by its arrivals less what it runs), so one sparse LU
    solves the block-diagonal system of all the points at once."""
    if len(rate) == 0:
        return []
    chains = [_transitions(*point) for point in zip(rate, decode, np.full(len(rate), delta), per_step, per_prompt, states)]
    sizes = np.array([len(q) for _, q, _ in chains])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    total = int(sizes.sum())
    balance = sparse.block_diag([matrix.T for matrix, _, _ in chains], format="csr") - sparse.identity(total, format="csr")
    keep = np.ones(total)
    keep[starts] = 0.0  # the first balance equation of each point, replaced by pi(0) = 1
    pinned = sparse.coo_matrix((np.ones(len(starts)), (starts, starts)), shape=(total, total))
    system = (sparse.diags(keep) @ balance + pinned).tocsc()
    rhs = np.zeros(total)
    rhs[starts] = 1.0
    solution = np.clip(spsolve(system, rhs), 0.0, None)
    out = []
    for (matrix, q, x), start, size in zip(chains, starts, sizes):
        pi = solution[start : start + size]
        out.append((q, x, pi / pi.sum(), matrix))
    return out


def _chain_gap_mean(decode, slope: float, batch_mean, batch_var: float, chunk_ms, pi) -> float:
    """The mean gap over tokens, E[N tau] / E[N] over steps, from the chain: in state i a step decodes N sequences
    (mean E[N | i], variance Var(N | Q)) and lasts D(N) + c_i, D linear in N by `slope` about the mean, so
    E[N tau | i] = E[N | i] (D(E[N | i]) + c_i) + slope Var(N | Q)."""
    tokens = pi @ batch_mean
    if not tokens > 0:
        return float(decode(1.0))
    return float(pi @ (batch_mean * (decode(np.maximum(batch_mean, 0.0)) + chunk_ms) + slope * batch_var) / tokens)


def _settled_ratio(ratios: list[float]) -> float | None:
    """The rate at which a chain forgets, once the last ratios of successive deviations agree (to 1e-3, eight in a
    row, below 1): then one mode is left and the rest of a sum is geometric; None before that (and between every
    fourth lag: the test is not free). Callers take the geometric rest only where it is a small share of the sum,
    so that an error in the ratio barely shows."""
    if len(ratios) < 12 or len(ratios) % 4:
        return None
    last = ratios[-8:]
    if max(last) >= 1.0 or min(last) <= 0.0 or max(last) - min(last) > 1e-3 * max(last):
        return None
    return last[-1]


def _mixed(left: float, steps: float) -> bool:
    """Whether a deviation that fell to `left` of its start in PROBE_LAGS lags is gone (below 1e-6) long before
    `steps`: then sums to `steps` are the infinite ones."""
    if steps <= 2 * PROBE_LAGS:
        return False
    return left <= 0.0 or (steps / PROBE_LAGS - 1) * np.log(max(left, 1e-300)) <= np.log(1e-6)


def _geometric_sum(ratio: float, terms: int) -> float:
    """sum_{k=1..terms} ratio^k."""
    return ratio * (1 - ratio**terms) / (1 - ratio) if terms > 0 else 0.0


def _ramp_sum(ratio: float, length: float) -> float:
    """sum_{k=1..M-1} (M - k) ratio^k for M = length (the weights of the autocovariances past the last lag)."""
    if length <= 1:
        return 0.0
    return ratio * (length * (1 - ratio) - (1 - ratio**length)) / (1 - ratio) ** 2


def _fundamental(matrix, pi, y):
    """Infinite sums of a zero-mean y (pi . y = 0) along the chain, by one sparse LU: (h, h2, k) with
    h = sum_{l>=0} P^l y, h2 = sum_{l>=0} P^l h and k = sum_{l>=0} R^l y (R the time-reversed chain).

    (I - P) h = y with pi . h = 0: M = I - P + 1 e_0^T is invertible, M g = y gives g_0 = pi . y = 0 and so
    (I - P) g = y; h = g - (pi . g). For R = D^-1 P^T D (D = diag pi): (I - P^T) (D k) = D y, solved with M^T
    (1 . (D k) = 0 keeps pi . k = 0)."""
    size = len(y)
    column = sparse.csc_matrix((np.ones(size), (np.arange(size), np.zeros(size, dtype=int))), shape=(size, size))
    lu = splu((sparse.identity(size, format="csc") - matrix.tocsc() + column).tocsc())
    g = lu.solve(y)
    h = g - pi @ g
    g2 = lu.solve(h)
    h2 = g2 - pi @ g2
    visited = pi > 1e-200  # states the chain all but never visits get no reversed sum (1 / pi would overflow)
    k = np.where(visited, lu.solve(pi * y, trans="T") / np.where(visited, pi, 1.0), 0.0)
    return h, h2, k


def _batch_given_state(chains: list, m: float) -> list[tuple[np.ndarray, float]]:
    """The sequences a step decodes, N, given the state its chain is in: per chain (matrix P, law pi, prompts run
    x), (E[N | Q = q_i] per state, Var(N | Q)).

    A prompt decodes its m = OSL - 1 tokens in the m steps after the one that ends it (every step decodes every
    running sequence once), so N_t = sum_{j=1..m} x_{t-j}, a moving sum of the chain's own output: steps that
    carry prompts follow steps that did (the prompts that arrive during a long step make the next one long), so N
    is overdispersed and larger where prompts run. With y = x - E[x], C(l) = E[y_0 y_l] (y's autocovariance,
    C(l) = pi . (y P^l y)) and R the time-reversed chain (R[i, j] = pi_j P[j, i] / pi_i):

        E[N | Q_t = i] = m E[x] + sum_{j=1..m} (R^j y)_i,     Var(N) = m C(0) + 2 sum_{l=1..m-1} (m - l) C(l)

    and Var(N | Q) = Var(N) - Var(E[N | Q]) (total variance). The sums stop where every chain has forgotten (both
    terms below FORGOTTEN of x's scale): the mixing time, not m, bounds the work. Each chain steps on its own
    (dense where it is small), so a slow one near saturation does not hold the others."""
    out = []
    for matrix, pi, x in chains:
        mean_x = float(pi @ x)
        y = x - mean_x
        scale = max(float(np.max(np.abs(y))), 1e-300)
        var_n = m * float(pi @ (y * y))
        weighted = pi * y
        # states the chain all but never visits (pi below 1e-200) get no reversed row: 1 / pi would overflow
        backward = (sparse.diags(np.where(pi > 1e-200, 1.0 / np.maximum(pi, 1e-200), 0.0)) @ matrix.T
                    @ sparse.diags(pi)).tocsr()  # fmt: skip
        forward = matrix
        if len(x) <= DENSE_STATES:  # a small chain steps faster dense
            forward, backward = forward.toarray(), backward.toarray()
        conditional, ahead, behind = np.zeros_like(x), y.copy(), y.copy()
        size, ratios, cov_ratios, cov = scale, [], [], 0.0
        for lag in range(1, int(np.ceil(m)) + 1):
            if lag == PROBE_LAGS + 1 and _mixed(size / scale, m):
                # forgotten long before m: the sums to m are the infinite ones (_fundamental), to 1e-6
                h, h2, k = _fundamental(matrix, pi, y)
                conditional = k - y
                var_n = m * float(pi @ (y * y)) + 2 * (m * float(weighted @ (h - y)) - float(weighted @ (h2 - h)))
                break
            behind = backward @ behind
            conditional += min(1.0, m - lag + 1) * behind
            last_cov, cov = cov, 0.0
            if lag < m:
                ahead = forward @ ahead
                cov = float(weighted @ ahead)
                var_n += 2 * (m - lag) * cov
            last, size = size, float(np.max(np.abs(behind)))
            if size < FORGOTTEN * scale and abs(cov) < FORGOTTEN * scale**2:
                break
            ratios.append(size / last if last > 0 else 0.0)
            cov_ratios.append(cov / last_cov if last_cov != 0 else 0.0)
            ratio, cov_ratio = _settled_ratio(ratios), _settled_ratio(cov_ratios)
            if ratio is not None and cov_ratio is not None and lag < m:
                # the slowest modes alone are left: every further term is the last times its ratio^k; taken where
                # the rest is under TAIL_SHARE of the sums (an error in the ratio then barely shows)
                rest = behind * _geometric_sum(ratio, int(np.ceil(m)) - lag)
                rest_var = 2 * cov * _ramp_sum(cov_ratio, m - lag)
                if (np.max(np.abs(rest)) <= TAIL_SHARE * (np.max(np.abs(conditional)) + FORGOTTEN * scale)
                        and abs(rest_var) <= TAIL_SHARE * abs(var_n)):  # fmt: skip
                    conditional += rest
                    var_n += rest_var
                    break
        conditional = np.maximum(m * mean_x + conditional, 0.0)
        spread = float(pi @ (conditional - pi @ conditional) ** 2)
        out.append((conditional, max(var_n - spread, 0.0)))
    return out


def _window_prompts(chains: list, m: float) -> list[tuple[float, float, float]]:
    """The prompts a request's decode steps carry: per chain (matrix P, law pi, prompts run x), the probability
    that none of its m = OSL - 1 steps carries one, and the mean and variance of X = sum_{j=1..m} x_{t+j}.

    A request's prompt ends in step t, in a state drawn in proportion to pi x (a step ends x prompts), so its decode
    starts from mu = (pi x) P / (pi . x): right after a prompt, when more are likely waiting. Backward on the
    chain, f_j(i) = E[sum_{l<j} x_l | Q_0 = i], g_j(i) = E[(sum_{l<j} x_l)^2 | Q_0 = i], z_j(i) = P(x_l = 0 for
    l < j | Q_0 = i):

        f_{j+1} = x + P f_j,   g_{j+1} = x^2 + 2 x P f_j + P g_j,   z_{j+1} = [x = 0] P z_j

    and mu . f_m, mu . g_m - (mu . f_m)^2, mu . z_m. Once the chain has forgotten its start (the mean's increment
    is E[x] and the variance's increment constant, to FORGOTTEN) the rest is linear in the steps left, and mu . z
    falls by its last ratio per step: the work is bounded by the mixing time, not by m. Each chain steps on its
    own (dense where it is small)."""
    steps = max(int(np.ceil(m - 1e-9)), 0)
    out = []
    for matrix, pi, x in chains:
        ends = pi * x
        start = (matrix.T @ ends) / max(float(ends.sum()), 1e-300)
        mean_x = float(pi @ x)
        forward = matrix.toarray() if len(x) <= DENSE_STATES else matrix  # a small chain steps faster dense
        f, g, z = np.zeros_like(x), np.zeros_like(x), np.ones_like(x)
        idle = (x == 0).astype(float)
        mean = var = 0.0
        last_var_step, last_mean_step, none, decay, done = np.nan, np.nan, 1.0, 1.0, 0
        ratios, var_steps, extrapolated = [], [], False
        for done in range(1, steps + 1):
            ahead = forward @ f
            f, g, z = x + ahead, x * x + 2 * x * ahead + forward @ g, idle * (forward @ z)
            new_none = float(start @ z)
            decay, none = (new_none / none if none > 0 else 0.0), new_none
            new_mean = float(start @ f)
            new_var = float(start @ g) - new_mean**2
            mean_step, var_step = new_mean - mean, new_var - var
            mean, var = new_mean, new_var
            settled = (abs(mean_step - mean_x) <= FORGOTTEN * max(mean_x, 1e-300)
                       and abs(var_step - last_var_step) <= FORGOTTEN * max(abs(var_step), 1e-300))  # fmt: skip
            if len(var_steps) >= 1 and abs(last_mean_gap := last_mean_step - mean_x) > 0:
                ratios.append(abs(mean_step - mean_x) / abs(last_mean_gap))
            last_var_step, last_mean_step = var_step, mean_step
            var_steps.append(var_step)
            if done > 2 and settled:
                break
            ratio = _settled_ratio(ratios)
            if ratio is not None and len(var_steps) >= 3 and done < steps:
                # the slowest mode alone is left: the mean's step nears E[x] and the variance's its limit by ratio^k;
                # taken where what rests on the ratio is under TAIL_SHARE of the result
                left = steps - done
                rest_mean = (mean_step - mean_x) * _geometric_sum(ratio, left)
                limit = var_steps[-1] - (var_steps[-1] - var_steps[-2]) * ratio / (1 - ratio)
                rest_var = (var_step - limit) * _geometric_sum(ratio, left)
                final_mean, final_var = mean + left * mean_x + rest_mean, var + left * limit + rest_var
                if (abs(rest_mean) <= TAIL_SHARE * abs(final_mean) and abs(rest_var) + left * abs(var_step - limit)
                        <= TAIL_SHARE * abs(final_var)):  # fmt: skip
                    mean, var = final_mean, max(final_var, 0.0)
                    none *= min(max(decay, 0.0), 1.0) ** left
                    extrapolated = True
                    break
        if not extrapolated:
            left = steps - done
            mean = mean + left * mean_x
            var = max(var + left * (0.0 if np.isnan(last_var_step) else last_var_step), 0.0)
            none = none * min(max(decay, 0.0), 1.0) ** left  # z decays by its dominant rate once the chain has forgotten
        out.append((none, mean, var))
    return out


def _prompts_ahead(rate, decode, delta, per_step, q, x, pi) -> float:
    """The mean number of prompts that finish before an arrival's last chunk runs: those the step in progress
    runs, and those ahead of it (left over, or arrived before it in that step) that the steps before its last one
    run (none unless the budget spills)."""
    tau = decode + delta * x
    biased = pi * tau / np.sum(pi * tau)
    before_mean = rate * tau[:, None] * _U_NODES[None, :]  # states x U
    most = float(before_mean.max())
    before = np.arange(int(most + 10 * np.sqrt(most) + 10) + 1)
    p_before = _poisson_pmf(before[None, None, :], before_mean[..., None])
    waiting = (q - x)[:, None, None] + before[None, None, :]
    earlier = np.maximum(np.ceil((waiting + 1.0) / per_step - 1e-9), 1.0) - 1.0  # steps before its last one
    done = np.minimum(waiting, earlier * per_step)
    w = biased[:, None, None] * _U_WEIGHTS[None, :, None] * p_before
    return float(np.sum(biased * x) + np.sum(w * done) / np.sum(w))


def _ttft_atoms(rate, decode, delta, per_step, q, x, pi, idle: float, alone: float):
    """The engine's TTFT (from arrival to the end of the step that runs its prompt's last token) as weighted
    atoms (module docstring), and their weights. An arrival with no prompt ahead and no prompt work in the step in
    progress finds the engine idle with probability `idle` (nothing decoding): its prompt runs `alone` at once."""
    tau = decode + delta * x
    biased = pi * tau / np.sum(pi * tau)
    keep = biased > 1e-12
    tau, left, biased, quiet = tau[keep], (q - x)[keep], biased[keep], (x[keep] == 0) & (q[keep] == 0)
    before_mean = rate * tau[:, None] * _U_NODES[None, :]  # states x U
    most = float(before_mean.max())
    before = np.arange(int(most + 10 * np.sqrt(most) + 10) + 1)
    p_before = _poisson_pmf(before[None, None, :], before_mean[..., None])  # states x U x A
    residual = (1 - _U_NODES[None, :]) * tau[:, None]
    through = left[:, None, None] + before[None, None, :] + 1.0  # prompts up to and with the own one
    steps = np.maximum(np.ceil(through / per_step - 1e-9), 1.0)
    full = decode + delta * per_step
    remainder = through - (steps - 1) * per_step
    behind_mean = rate * (residual[..., None] + (steps - 1) * full)
    # what arrives behind it before its last step: a three-point law with the Poisson's mean and variance
    spread = np.sqrt(3 * behind_mean)
    atoms, weights = [], []
    base = residual[..., None] + (steps - 1) * full + decode
    w = biased[:, None, None] * _U_WEIGHTS[None, :, None] * p_before
    for offset, share in ((-1.0, 1 / 6), (0.0, 2 / 3), (1.0, 1 / 6)):
        behind = np.maximum(behind_mean + offset * spread, 0.0)
        atoms.append(base + delta * np.minimum(remainder + behind, np.maximum(per_step, remainder)))
        weights.append(w * share)
    # nothing ahead and nothing in the step: the share `idle` of those arrivals meets an idle engine
    found_idle = float(np.sum(w[quiet][:, :, 0])) * idle
    for k in range(3):
        weights[k][quiet, :, 0] *= 1.0 - idle
    atoms = np.concatenate([[alone]] + [a.ravel() for a in atoms])
    weights = np.concatenate([[found_idle]] + [v.ravel() for v in weights])
    heavy = weights > ATOM_FLOOR * weights.sum()
    return atoms[heavy], weights[heavy] / weights[heavy].sum()


def _weighted_quantile(values, weights, q: float, presorted: bool = False) -> float:
    order = slice(None) if presorted else np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    return float(values[order][min(np.searchsorted(cumulative, q * cumulative[-1]), len(values) - 1)])


def open_loop_curve(
    shape: EngineShape,
    eff: Efficiency,
    isl: int,
    osl: int,
    rates_rps,
    max_running: int | None,
    percentile: float | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
) -> list[SteadyState]:
    """The open-loop steady state (module docstring) at each rate, latencies at `percentile` (None: means).
    A rate the engine cannot serve (prompts or decode beyond its speed, or the running limit) has infinite
    latencies."""
    return open_loop_states(shape, eff, isl, osl, rates_rps, max_running, percentile, token_budget)[0]


def open_loop_states(
    shape: EngineShape,
    eff: Efficiency,
    isl: int,
    osl: int,
    rates_rps,
    max_running: int | None,
    percentile: float | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
) -> tuple[list[SteadyState], list[SteadyState]]:
    """`open_loop_curve` at `percentile` and of means, from one solve: (states at the percentile, means).

    A pure function of its arguments, so solves are kept (the last CACHE_SIZE, keyed by the arguments' full repr):
    a plan asks for one engine's curve at every batch cap, and sweeps and `--verify` plan the same engines again."""
    key = repr((shape, eff, isl, osl, tuple(float(r) for r in np.ravel(rates_rps)), max_running, percentile, token_budget))
    kept = _SOLVED.get(key)
    if kept is None:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # rates beyond the engine are inf, masked
            kept = _open_loop(shape, eff, isl, osl, rates_rps, max_running, percentile, token_budget)
        _SOLVED[key] = kept
        if len(_SOLVED) > CACHE_SIZE:
            _SOLVED.popitem(last=False)
    else:
        _SOLVED.move_to_end(key)
    return list(kept[0]), list(kept[1])


def _open_loop(shape, eff, isl, osl, rates_rps, max_running, percentile, token_budget):
    rate = np.asarray(rates_rps, dtype=float) / 1e3  # per ms
    per_token = shape.speculation.tokens_per_step if shape.speculation is not None else 1.0
    real_osl, steps_osl = osl, 1.0 + max(osl - 1, 0) / per_token
    m = steps_osl - 1.0
    context = isl + real_osl / 2
    limit = float(max_running) if max_running else np.inf

    def decode(batch):
        return step_ms(shape, eff, batch, context)

    delta = float(step_ms(shape, eff, COMPUTE_BOUND_TOKENS, 0.0, 1.0, isl) - step_ms(shape, eff, COMPUTE_BOUND_TOKENS, 0.0))
    alone = float(step_ms(shape, eff, 0.0, 0.0, 1.0, isl))
    fixed = float(fixed_ms(shape, eff))  # a step of a prompt's chunk alone pays it again
    rho = rate * delta
    u = 1.0 - rho
    ok = u > 0
    safe_u = np.where(ok, u, 1.0)
    # Newton on n = lambda m D(1 + n) / u (D piecewise smooth in the batch: a few steps settle it)
    n, slope = np.zeros_like(rate), np.zeros_like(rate)
    for _ in range(50):
        d0 = decode(1.0 + n)
        slope = decode(2.0 + n) - d0
        gain = rate * m * slope / safe_u
        ok = ok & (gain < 1.0)
        new = np.where(ok, rate * m * (d0 - slope * n) / safe_u / np.where(ok, 1.0 - gain, 1.0), 0.0)
        close = np.isclose(new, n, rtol=1e-12, atol=1e-12)
        n = np.where(close, n, new)  # each point stops where it settles, whatever the others do
        if np.all(close):
            break
    tpot_plain = np.where(ok, decode(1.0 + n) / safe_u, 1.0)
    # the spread of one request's TPOT (a Poisson functional of the others' arrivals, module docstring)
    feedback = np.maximum(u - rate * m * slope, 1e-300)
    tpot_var = np.where(ok, rate * m * tpot_plain * ((2 / 3) * (slope * m) ** 2 + delta**2 + slope * m * delta)
                        / feedback**2, 0.0) / max(m, 1.0) ** 2  # fmt: skip
    # the token-weighted mean gap (module docstring), first without the prompts ahead: their law needs the steps'
    batch_var = n + (rate * m) ** 2 * tpot_var
    _, tpot, n_time, ok = _token_mean(decode, rate, m, u, rho, slope, batch_var, np.zeros_like(rate), n, ok)
    # the step chain at the pace of the batch's time average, and the batch it gives (_batch_given_state): its
    # token-weighted mean gap replaces the fluid estimate, and the chain is solved again at the pace that gap
    # gives (Little: lambda m T) until the two agree to 1% (two rounds, mostly)
    # the chain steps at the mean batch's pace; a larger batch makes longer steps that let more prompts in (lambda
    # slope / (1 - rho) more a step for each sequence more, each staying m steps): that feedback g = lambda m slope
    # / (1 - rho) widens the spread of the batch and of a window's prompts by 1 / (1 - g) (a birth-death chain's
    # linear-noise variance)
    widen = 1.0 / (1.0 - np.minimum(rate * m * slope / safe_u, 0.95))
    # each point's rounds are its own (a point's figures never depend on which other rates are asked with it)
    per_step, chunks, gap = np.ones(len(rate)), np.ones(len(rate)), np.full(len(rate), np.nan)
    chain_of, batch_of = {}, {}
    active = ok.copy()
    for _ in range(4):
        room = np.maximum(token_budget - n_time, 1.0)
        per_step = np.where(active, room / isl, per_step)  # prompts a step runs
        chunks = np.ceil(1.0 / np.minimum(per_step, 1.0) - 1e-9)  # steps one prompt takes
        per_prompt, states = _grid_size(rate, decode(n_time), delta, per_step)
        for i in np.flatnonzero(active & (states <= 0)):  # the queue of prompts does not settle: no answer
            chain_of.pop(i, None)
        active = active & (states > 0)
        rows = np.flatnonzero(active)
        chains = _step_chains(rate[rows], decode(n_time)[rows], delta, per_step[rows], per_prompt[rows], states[rows])
        batches = _batch_given_state([(matrix, pi, x) for _, x, pi, matrix in chains], m)
        for i, chain, batch in zip(rows, chains, batches):
            chain_of[i], batch_of[i] = chain, batch
            gap[i] = _chain_gap_mean(decode, slope[i], batch[0], batch[1] * widen[i], delta * chain[1], chain[2])
        new_n = rate * m * np.nan_to_num(gap)
        settled = np.abs(new_n - n_time) <= 1e-2 * np.maximum(n_time, 1e-9)
        n_time = np.where(active, new_n, n_time)
        active = active & ~settled
        if not active.any():
            break
    ok = ok & np.isin(np.arange(len(rate)), list(chain_of)) & np.isfinite(gap)  # no NaN figure, ever
    solved = np.flatnonzero(ok)
    chains = [chain_of[i] for i in solved]
    batches = [batch_of[i] for i in solved]
    # the prompts that finish before one's own (the step in progress's, and those ahead of it that earlier steps
    # run when the budget spills): they decode while its chunks run, so steps that carry prompts carry more
    # sequences than the average
    ahead = np.zeros_like(rate)
    for i, (q, x, pi, _) in zip(solved, chains):
        # less the sequences that finish meanwhile (a step ends N / (OSL - 1) of them)
        ahead[i] = max(_prompts_ahead(rate[i], decode(n_time[i]), delta, per_step[i], q, x, pi) - n_time[i] / max(m, 1.0), 0.0)
    tpot = np.where(ok, gap, np.inf)
    t0 = eff.ttft_overhead_ms
    count = len(rate)
    busy_mean = np.full(count, np.inf)
    chunks_mean, chunk_cost = np.zeros(count), np.zeros(count)
    laws = [None] * count
    for i, (q, x, pi, matrix) in zip(solved, chains):
        if not ok[i]:
            continue
        # the decode step varies with the batch (the same one for the step in progress and those that follow):
        # three batches of the law of N (its mean and variance), each with its own atoms
        parts = []
        spread = np.sqrt(max(batch_var[i], 0.0))
        for offset, share in ((-np.sqrt(3.0), 1 / 6), (0.0, 2 / 3), (np.sqrt(3.0), 1 / 6)):
            held = max(n_time[i] + ahead[i] + offset * spread, 0.0)
            part = _ttft_atoms(rate[i], float(decode(held)), delta, per_step[i], q, x, pi, float(np.exp(-n_time[i])),
                               alone + (chunks[i] - 1) * fixed)  # fmt: skip
            parts.append((part[0], part[1] * share))
        atoms, weights = np.concatenate([a for a, _ in parts]), np.concatenate([w for _, w in parts])
        order = np.argsort(atoms, kind="stable")  # sorted once: every quantile of the law is then a search
        atoms, weights = atoms[order], weights[order]
        busy_mean[i] = np.sum(atoms * weights)
        laws[i] = (x, pi, atoms, weights, matrix)
        chunks_mean[i] = np.sum(pi * x)
    chunk_cost[:] = delta
    engine_ttft = busy_mean  # an idle engine is among the atoms (_ttft_atoms)
    engine_s = np.where(ok, engine_ttft + m * tpot, np.inf)
    offered = rate * engine_s
    if np.isfinite(limit):
        waits, drain, needed = _slots(shape, eff, isl, osl, rate, int(limit))
        ok = ok & (drain > 0)
        # the chain's occupancy is too narrow where prompts slow every sequence at once: the requests in the
        # engine are also Poisson about `offered`, spread by the slow-downs all of them share
        system_var = offered + (rate * m) ** 2 * tpot_var
        waits = np.where(ok, np.maximum(waits, _count_sf(limit, offered, system_var)), 1.0)
        needed = np.where(ok, np.maximum(needed, np.minimum(_count_ppf(SLOT_PERCENTILE / 100, offered, system_var), limit)), 0.0)
    else:
        waits, drain = np.zeros_like(rate), np.full(count, np.inf)
        needed = np.where(ok, _count_ppf(SLOT_PERCENTILE / 100, offered, offered + (rate * m) ** 2 * tpot_var), 0.0)
    slot_mean = np.where(ok, waits / drain, np.inf)
    ttft_mean = np.where(ok, t0 + engine_ttft + slot_mean, np.inf)
    itl_mean = np.where(ok, tpot, np.inf)
    running = np.where(ok, np.minimum(offered, limit), 0.0)
    cap = np.minimum(needed, limit)
    rho_out = np.where(ok, rho, 1.0)

    def states(ttft_at, tpot_at, itl_at, e2e_at, slot_at) -> list[SteadyState]:
        return [
            SteadyState(
                concurrency=int(max(cap[i], 1)), running=int(max(round(float(running[i])), 1)),
                ttft_ms=float(ttft_at[i]), tpot_ms=float(tpot_at[i] / per_token), itl_ms=float(itl_at[i] / per_token),
                e2e_ms=float(e2e_at[i]), request_throughput_rps=float(rate[i] * 1e3),
                output_tokens_per_s=float(rate[i] * 1e3 * real_osl), prefill_share=float(rho_out[i]), prefill_ms=alone,
                decode_step_ms=float(decode(1.0 + n_time[i])), decoding=float(1.0 + n_time[i]),
                slot_wait_ms=float(slot_at[i]), chunks_per_step=float(chunks_mean[i]), chunk_ms=float(chunk_cost[i]),
            )  # fmt: skip
            for i in range(count)
        ]

    means = states(ttft_mean, tpot, itl_mean, ttft_mean + m * tpot, slot_mean)
    if percentile is None:
        return means, means
    p = percentile / 100.0
    ttft_at, itl_at = np.full(count, np.inf), np.full(count, np.inf)
    for i in np.flatnonzero(ok):
        x, pi, atoms, weights, _ = laws[i]
        values, mass = atoms + t0, weights
        if waits[i] < 1e-6:
            ttft_at[i] = _weighted_quantile(values, mass, p, presorted=True)
        else:
            values, mass = _compress(values, mass, presorted=True)
            def survival(y, values=values, mass=mass, w=waits[i], d=drain[i]):
                gap = y[:, None] - values[None, :]
                waited = np.where(gap < 0, 1.0, np.exp(-d * np.maximum(gap, 0.0)))
                return np.sum(mass[None, :] * np.where(gap < 0, 1.0, w * waited), axis=1)

            ttft_at[i] = float(_bisect(survival, 1 - p, np.array([values.min()]), np.array([values.max() + 50 / drain[i]]), 50)[0])
    served = np.flatnonzero(ok)
    # one gap: the step of a random token, D(N) + Delta x, with N the sequences its step decodes given the chain's
    # state (_batch_given_state, widened as above), a token drawn in proportion to them
    law_of_batch = dict(zip(solved, batches))
    for i in served:
        batch_mean, batch_var_given = law_of_batch[i]
        itl_at[i] = _gap_quantile(decode, batch_mean, batch_var_given * widen[i], delta * laws[i][0], laws[i][1], p)
    slot_at = np.where(ok & (waits > 1 - p), np.log(np.maximum(waits, 1e-300) / (1 - p)) / drain, 0.0)
    slot_at = np.minimum(slot_at, ttft_at)
    tpot_at, e2e_at = np.full(count, np.inf), np.full(count, np.inf)
    windows = _window_prompts([(laws[i][4], laws[i][1], laws[i][0]) for i in served], m)
    for i, (none, k_mean, k_var) in zip(served, windows):
        # TPOT = base + unit X + G: X the prompts its decode steps carry (_window_prompts: none with probability
        # `none`, else in whole chunks or prompts, at most one lattice a step), each adding its prompt and, on
        # average, half the steps left as one more sequence decoding (unit); G those decoding when it starts,
        # sharing a part of its steps (normal); base such that the mean is the token-weighted TPOT. The chain
        # steps at the mean batch's pace: a window of more prompts also runs a larger batch, longer steps that let
        # more in, which widens X's spread as it widens the batch's (`widen`)
        gaps = max(m, 1.0)
        unit = (delta + slope[i] * m / 2) / gaps
        sharing = rate[i] * m * tpot[i] * (5 / 12) * (slope[i] * m) ** 2 / feedback[i] ** 2 / gaps**2
        lattice = min(per_step[i], 1.0)  # a chunk of a prompt, or one whole prompt
        most = int(np.floor(max(m, 0.0) * max(per_step[i], 1.0) + 1e-9))
        stretched = k_var * widen[i]
        values, mass = _window_law(tpot[i] - unit * k_mean, unit, none, k_mean, stretched, np.sqrt(sharing), lattice, most)
        tpot_at[i] = _weighted_quantile(values, mass, p)
        # E2E = TTFT + m TPOT, independent: the quantile of the sum of the two laws
        x, pi, atoms, weights, _ = laws[i]
        first, first_mass = _compress(atoms + t0 + slot_mean[i], weights, 64, presorted=True)
        rest, rest_mass = _compress(values * m, mass, 64)
        e2e_at[i] = _weighted_quantile((first[:, None] + rest[None, :]).ravel(), (first_mass[:, None] * rest_mass[None, :]).ravel(), p)
    return states(ttft_at, tpot_at, itl_at, e2e_at, slot_at), means


def _window_law(base: float, unit: float, none: float, mean: float, var: float, sigma: float, lattice: float,
                most: int):
    """base + unit X + G as weighted atoms. X = 0 with probability `none`; else X = lattice x K, K from 1 to `most`
    (a step runs at most one lattice of prompt work: a chunk, or C whole prompts) distributed as 1 + a
    beta-binomial on 0..most - 1 with the rest of X's mean and variance (binomial where that is narrower), or,
    beyond 400 values, Gamma on 256 equally likely levels; G normal (0, sigma) by a 5-point Gauss-Hermite rule."""
    some = 1.0 - none
    if some > 1e-12 and mean > 0 and most >= 1:
        given_mean, given_var = mean / some, max((var + mean**2) / some - (mean / some) ** 2, 0.0)
        if most <= 400:
            trials = most - 1
            share = float(np.clip((given_mean / lattice - 1.0) / max(trials, 1), 1e-9, 1 - 1e-9))
            spread = given_var / lattice**2 / max(trials * share * (1 - share), 1e-300)  # (s + n) / (s + 1)
            counts = np.arange(trials + 1)
            if trials == 0 or spread <= 1.0 + 1e-9:
                pmf = binom.pmf(counts, trials, share)
            else:
                total = max((trials - spread) / (spread - 1.0), 1e-3)  # a + b
                pmf = betabinom.pmf(counts, trials, share * total, (1 - share) * total)
            positive, positive_mass = lattice * (1.0 + counts), some * pmf / pmf.sum()
        else:
            levels = (np.arange(256) + 0.5) / 256
            positive = (gamma.ppf(levels, given_mean**2 / given_var, scale=given_var / given_mean) if given_var > 0
                        else np.full(len(levels), given_mean))  # fmt: skip
            positive_mass = np.full(len(levels), some / len(levels))
        counts, k_mass = np.concatenate([[0.0], positive]), np.concatenate([[none], positive_mass])
    else:
        counts, k_mass = np.zeros(1), np.ones(1)
    nodes, node_weights = np.polynomial.hermite_e.hermegauss(5)
    node_weights = node_weights / node_weights.sum()
    values = (base + unit * counts)[:, None] + sigma * nodes[None, :]
    weights = k_mass[:, None] * node_weights[None, :]
    keep = weights > 0
    return values[keep], weights[keep] / weights[keep].sum()


def _compress(values, weights, levels: int = 2048, presorted: bool = False):
    """A weighted sample of many atoms as `levels` equally likely ones (its quantiles), sorted."""
    order = slice(None) if presorted else np.argsort(values, kind="stable")
    values, cumulative = values[order], np.cumsum(weights[order])
    cumulative /= cumulative[-1]
    if len(values) <= levels:
        return values, np.diff(np.concatenate([[0.0], cumulative]))
    at = (np.arange(levels) + 0.5) / levels
    return values[np.minimum(np.searchsorted(cumulative, at), len(values) - 1)], np.full(levels, 1.0 / levels)


def _gap_quantile(decode, batch_mean, batch_var: float, chunk_ms, pi, q: float) -> float:
    """The q-quantile of one gap, over tokens: a token's step is in chain state i with probability pi_i E[N | i] /
    E[N] (a step gives one token to each sequence it decodes), and lasts D(N) + c_i, N the sequences it decodes:
    negative binomial of mean E[N | i] and variance Var(N | Q) (Poisson where that is not above the mean),
    size-biased for the token's own sequence (1 + NB(r + 1, p); 1 + Poisson(mu)), c_i the state's prompt work."""
    tokens = pi * batch_mean
    if not np.sum(tokens) > 0:  # nothing decodes (OSL 1): a gap would be one step of one sequence
        return float(decode(1.0))
    keep = tokens > 1e-10 * np.sum(tokens)  # states of a negligible share of tokens (1e-7 in all at most) left out
    weight, mean, chunk = tokens[keep] / np.sum(tokens[keep]), np.maximum(batch_mean[keep], 1e-9), chunk_ms[keep]
    # states of the same prompt work whose batches differ by under a quarter of the batch's spread are one state
    # (their weighted mean): the mixture's variance grows by under 0.6% of the batch's, a gap's law barely moves
    width = 0.25 * np.sqrt(max(batch_var, float(weight @ mean), 1e-9))
    _, group = np.unique(np.stack([chunk, np.floor(mean / width)]), axis=1, return_inverse=True)
    group = group.ravel()
    merged = np.bincount(group, weights=weight)
    mean = np.bincount(group, weights=weight * mean) / merged
    chunk = np.bincount(group, weights=weight * chunk) / merged
    weight = merged
    size, prob = _count_law(mean, np.full(len(mean), batch_var))
    poissonian = batch_var <= mean * (1 + 1e-9)
    spread = 7 * np.sqrt(np.maximum(batch_var, mean)) + 8  # beyond it each law holds < 1e-8
    bottom, top = int(max(np.min(mean - spread), 0)), int(np.max(mean + spread))
    # whole counts of the others over the range that holds them, at most GAP_GRID of them
    counts = np.unique(np.round(np.linspace(bottom, top, min(top - bottom + 1, GAP_GRID))))
    steps = decode(1.0 + counts)
    # P(others <= k): Poisson Q(k + 1, mu), negative binomial NB(r + 1, p): I_p(r + 1, k + 1)
    cdf = np.where(poissonian[:, None], gammaincc(counts[None, :] + 1, mean[:, None]),
                   betainc(size[:, None] + 1, counts[None, :] + 1, prob[:, None]))  # fmt: skip

    def survival(y):
        index = np.searchsorted(steps, y[:, None] - chunk[None, :], side="right") - 1
        below = np.where(index >= 0, np.take_along_axis(cdf, np.clip(index, 0, len(counts) - 1).T, axis=1).T, 0.0)
        return 1.0 - below @ weight

    low, high = np.array([float(steps[0]) * 0.999]), np.array([float(steps[-1] + chunk.max()) * 1.001])
    return float(_bisect(survival, 1 - q, low, high, 36)[0])

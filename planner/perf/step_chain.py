"""The engine's iterations under requests arriving at random, as a Markov chain, and the sums along it that the
open-loop model (planner/perf/open_loop.py) reads.

An iteration runs the prompts waiting, up to the token budget beside the decoders: with Q prompts waiting at its
start it runs x = min(Q, C) of them in tau(Q) = D + Delta x while Poisson(lambda tau) more arrive, so
Q' = Q - x + Poisson(lambda tau(Q)): a chain on a grid of Q (`transitions`), solved for its stationary law by one
sparse LU (`step_chains`). A request's decode phase is the m = OSL - 1 steps after its prompt ends, so the batch a
step decodes is a moving sum of the chain's output (`batch_given_state`) and the prompts a request's own steps carry
a sum along the chain from the state its prompt ended in (`window_prompts`). Sums run until the chain has forgotten
its start: explicitly, by their geometric rest once one mode is left, or as infinite sums by the fundamental matrix
(`fundamental`) where the chain forgets long before m; the batch's sums of a small or slowly mixing chain are taken
in closed form, the fundamental matrix less a matrix power (`closed_sums`). The matrices are small: BLAS runs on one
thread while they are solved (`serial_blas`).
"""

from __future__ import annotations

import functools
from contextlib import contextmanager

import numpy as np
from scipy import sparse
from scipy.linalg import lu_factor, lu_solve
from scipy.sparse.linalg import splu, spsolve
from scipy.special import gammaln, pdtr, pdtrik

try:  # scipy's compiled CSR product (private, stable since scipy 0.x); the public product where it moved
    from scipy.sparse._sparsetools import csr_matvec as _csr_matvec
except ImportError:  # pragma: no cover
    _csr_matvec = None

MAX_STATES = 1024  # grid points of the step chain; a queue that needs more is beyond what the engine serves
TAIL = 1e-9  # probability left out of Poisson sums and of the chain's grid
FORGOTTEN = 1e-9  # a chain has forgotten its start when what is left of a deviation is below this share of x's scale
DENSE_STATES = 160  # chains of up to this many states step as dense matrices
CLOSED_STATES = 96  # chains of up to this many states sum in closed form (`closed_sums`), cheaper than stepping lags
FORGOTTEN_POWER = 1e-15  # a power of the chain whose every row is pi to this has forgotten its start
CLOSED_MAX_STATES = 272  # larger chains step first; those still mixing after PROBE_LAGS sum in closed form up to this
PROBE_LAGS = 48  # lags stepped before the infinite sums are taken (where the chain has forgotten by then)
TAIL_SHARE = 0.01  # a geometric tail is summed in closed form once it is under this share of the sum


@functools.cache
def _blas_controller():
    from threadpoolctl import ThreadpoolController  # 20 ms to import: where the model runs

    return ThreadpoolController()


@contextmanager
def serial_blas():
    """BLAS on one thread while an open loop is solved: its matrices are small (a chain's states, hundreds at most),
    where OpenBLAS's threads only contend, and worse in every forked pricing worker at once (the 16,000-token
    what-if case took 2.7-2.9x longer with two threads in each of two workers). The library's threads are as they were
    afterwards."""
    with _blas_controller().limit(limits=1, user_api="blas"):
        yield


def stepper(matrix):
    """v -> matrix @ v for a chain's (dense or sparse) matrix, with scipy's per-call dispatch left out where its
    compiled kernel is at hand: the sums along a slow chain step thousands of times, and the dispatch cost more
    than the product. Same products, to the bit."""
    if isinstance(matrix, np.ndarray):
        return matrix.dot
    csr = matrix.tocsr()
    if _csr_matvec is None or csr.dtype != np.float64:
        return csr.dot
    rows, cols = csr.shape
    indptr, indices, data = csr.indptr, csr.indices, csr.data

    def step(vector):
        out = np.zeros(rows)
        _csr_matvec(rows, cols, indptr, indices, data, np.ascontiguousarray(vector, dtype=np.float64), out)
        return out

    return step


def poisson_pmf(k, mean):
    """Poisson probabilities (scipy.special directly: the chain asks for many small tables)."""
    mean = np.maximum(mean, 1e-300)
    return np.exp(k * np.log(mean) - mean - gammaln(k + 1.0))


def poisson_ppf(q: float, mean) -> np.ndarray:
    """The Poisson q-quantile, as scipy.stats.poisson.ppf computes it (for 0 < q < 1), from scipy.special: importing
    scipy.stats costs a fresh process about 0.3 s."""
    above = np.ceil(pdtrik(q, mean))
    below = np.maximum(above - 1, 0)
    return np.where(pdtr(below, mean) >= q, below, above)


def grid_size(rate, decode, delta, per_step) -> np.ndarray:
    """Grid points per prompt and the number of points the step chain needs (0: the queue of prompts does not
    settle, or needs more than MAX_STATES)."""
    full = decode + delta * per_step  # a step that runs C prompts
    arriving = rate * full
    drift = per_step - arriving  # prompts a backlogged step removes, net
    settled = drift > 0
    per_prompt = np.where(per_step < 2, 4.0, np.where(per_step < 4, 2.0, 1.0))
    # the backlog's tail falls as exp(-theta q), theta = 2 drift / variance (a random walk's); cover e^-18 of it
    theta = np.where(settled, 2 * drift / np.maximum(arriving, 1e-300), 1.0)
    top = per_step + poisson_ppf(1 - TAIL, np.maximum(arriving, 1e-300)) + 18.0 / theta
    states = np.ceil(top * per_prompt) + 2
    return per_prompt, np.where(settled & (states <= MAX_STATES), states, 0).astype(int)


def transitions(lam: float, decode: float, delta: float, per_step: float, per_prompt: float, size: int):
    """The step chain of one point on the grid q = i / per_prompt: (P, q, x), P[i, j] the probability that a step
    begun with q_i prompts waiting leaves q_j (row-stochastic, sparse; Poisson arrivals during the step split
    between the two grid points around where they land, the grid's end holding the tail), x the prompts each
    state's step runs."""
    q = np.arange(size) / per_prompt
    x = np.minimum(q, per_step)
    tau = decode + delta * x
    most = lam * tau[-1]
    arrivals = np.arange(int(most + 12 * np.sqrt(most) + 12) + 1)
    weight = poisson_pmf(arrivals[None, :], lam * tau[:, None])  # states x arrivals
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


def step_chains(rate, decode, delta: float, per_step, per_prompt, states) -> list:
    """The stationary law of Q, the prompts waiting at a step's start (module docstring), for each point (arrays
    over points). Returns, per point, (q, x, pi, P): the grid, the prompts each state's step runs, the law, the
    transition matrix (`transitions`).

    pi (P - I) = 0 with sum(pi) = 1: the balance equations (P^T - I) pi = 0, the one of Q = 0 replaced by
    sum(pi) = 1 (pinning pi(0) = 1 instead loses every digit where Q = 0 is all but never seen, as at thousands of
    requests/s). P is banded (a step moves Q by its arrivals less what it runs) but for that one row, so one sparse
    LU solves the block-diagonal system of all the points at once. A law that does not balance to 1e-8 (or has
    negative mass) is returned as NaN: no answer rather than a wrong one."""
    if len(rate) == 0:
        return []
    chains = [transitions(*point) for point in zip(rate, decode, np.full(len(rate), delta), per_step, per_prompt, states)]
    sizes = np.array([len(q) for _, q, _ in chains])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    total = int(sizes.sum())
    system = _balance_system([matrix for matrix, _, _ in chains], starts, sizes)
    rhs = np.zeros(total)
    rhs[starts] = 1.0
    solution = spsolve(system, rhs)
    out = []
    for (matrix, q, x), start, size in zip(chains, starts, sizes):
        pi = solution[start : start + size]
        bad = not np.all(np.isfinite(pi)) or pi.min() < -1e-9 * max(pi.max(), 1e-300)
        pi = np.clip(pi, 0.0, None)
        pi = pi / pi.sum() if pi.sum() > 0 else pi
        if bad or np.abs(matrix.T @ pi - pi).sum() > 1e-8:
            pi = np.full(size, np.nan)
        out.append((q, x, pi, matrix))
    return out


def _balance_system(matrices: list, starts: np.ndarray, sizes: np.ndarray):
    """The block-diagonal system of `step_chains` (CSC): each point's balance equations P^T - I, its first row
    replaced by ones (sum(pi) = 1), without explicit zeros. Built from the entries directly: sparse sums and products
    of the blocks cost more than the LU."""
    rows, cols, values = [], [], []
    for matrix, start, size in zip(matrices, starts, sizes):
        entries = matrix.tocoo()
        off = (entries.row != entries.col) & (entries.data != 0) & (entries.col != 0)  # (P^T)[c, r] = P[r, c]
        diagonal = matrix.diagonal() - 1.0
        states = np.flatnonzero(diagonal != 0)
        states = states[states != 0]
        rows += [start + entries.col[off], start + states, np.full(size, start)]
        cols += [start + entries.row[off], start + states, start + np.arange(size)]
        values += [entries.data[off], diagonal[states], np.ones(size)]
    total = int(sizes.sum())
    return sparse.coo_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))), shape=(total, total)).tocsc()


# a token's own step: its batch's law by three points (Gauss-Hermite: the mean and -+ sqrt(3) standard deviations,
# weighing 2/3 and 1/6 each), exact for a step cubic in the batch
_OWN_OFFSETS, _OWN_WEIGHTS = np.array([-np.sqrt(3.0), 0.0, np.sqrt(3.0)]), np.array([1 / 6, 2 / 3, 1 / 6])


def chain_gap_means(decode, points: list) -> np.ndarray:
    """The mean gap over tokens, E[N tau] / E[N] over steps, from each chain, per point (E[N | Q] per state,
    Var(N | Q), the prompt work c_i of each state, the law pi): in state i a step decodes N sequences (mean
    mu_i = E[N | i], variance v = Var(N | Q)) and lasts D(N) + c_i. A token's own step is size-biased: N at mean
    E[N^2 | i] / mu_i = mu_i + v / mu_i (at least one sequence, its own: v >= mu_i (1 - mu_i) for a count), spread
    by about v, so E[N tau | i] / mu_i = E[D(N')] + c_i with N' of that mean and variance, taken at three points:
    D bends (a mixture of experts reads more experts with every sequence at first, fewer more past a few dozen), and
    D at the mean alone overstates the mean gap of a small, spread batch (by 13% for gpt-oss-20b at 8,000/200 tokens
    at 30% load; benchmarks/model_vs_sim.py). The states weigh pi_i mu_i. The steps of every point are costed in one
    call of `decode`."""
    if not points:
        return np.zeros(0)
    nodes = []
    for mu, var, _, _ in points:
        mean = np.maximum(np.maximum(mu, 1e-12) + var / np.maximum(mu, 1e-12), 1.0)
        spread = np.broadcast_to(np.sqrt(np.maximum(var, 0.0)), mean.shape)
        nodes.append(np.maximum(mean[:, None] + _OWN_OFFSETS[None, :] * spread[:, None], 1.0).ravel())
    bounds = np.cumsum([0] + [len(n) for n in nodes])
    steps = np.asarray(decode(np.concatenate(nodes + [np.ones(1)])), dtype=float)
    gaps = np.empty(len(points))
    for k, (mu, _, chunk_ms, pi) in enumerate(points):
        tokens = pi @ mu
        own = steps[bounds[k] : bounds[k + 1]].reshape(-1, len(_OWN_WEIGHTS)) @ _OWN_WEIGHTS
        gaps[k] = pi @ (mu * (own + chunk_ms)) / tokens if tokens > 0 else steps[-1]
    return gaps


def settled_ratio(ratios: list[float]) -> float | None:
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


def mixed(left: float, steps: float) -> bool:
    """Whether a deviation that fell to `left` of its start in PROBE_LAGS lags is gone (below 1e-6) long before
    `steps`: then sums to `steps` are the infinite ones."""
    if steps <= 2 * PROBE_LAGS:
        return False
    return left <= 0.0 or (steps / PROBE_LAGS - 1) * np.log(max(left, 1e-300)) <= np.log(1e-6)


def geometric_sum(ratio: float, terms: int) -> float:
    """sum_{k=1..terms} ratio^k."""
    return ratio * (1 - ratio**terms) / (1 - ratio) if terms > 0 else 0.0


def ramp_sum(ratio: float, length: float) -> float:
    """sum_{k=1..M-1} (M - k) ratio^k for M = length (the weights of the autocovariances past the last lag)."""
    if length <= 1:
        return 0.0
    return ratio * (length * (1 - ratio) - (1 - ratio**length)) / (1 - ratio) ** 2


def fundamental(matrix, pi, y):
    """Infinite sums of a zero-mean y (pi . y = 0) along the chain, by one sparse LU: (h, h2, k) with
    h = sum_{l>=0} P^l y, h2 = sum_{l>=0} P^l h and k = sum_{l>=0} R^l y (R the time-reversed chain).

    (I - P) h = y with pi . h = 0: M = I - P + 1 e_0^T is invertible, M g = y gives g_0 = pi . y = 0 and so
    (I - P) g = y; h = g - (pi . g). For R = D^-1 P^T D (D = diag pi): (I - P^T) (D k) = D y, solved with M^T
    (1 . (D k) = 0 keeps pi . k = 0)."""
    size = len(y)
    column = sparse.csc_matrix((np.ones(size), (np.arange(size), np.zeros(size, dtype=int))), shape=(size, size))
    lu = splu((sparse.identity(size, format="csc") - matrix.tocsc() + column).tocsc())
    return _infinite_sums(lambda v, transposed: lu.solve(v, trans="T" if transposed else "N"), pi, y)


def _infinite_sums(solve, pi, y):
    """(h, h2, k) of `fundamental`, given solve(v, transposed) by an LU of its M (sparse or dense)."""
    g = solve(y, False)
    h = g - pi @ g
    g2 = solve(h, False)
    h2 = g2 - pi @ g2
    visited = pi > 1e-200  # states the chain all but never visits get no reversed sum (1 / pi would overflow)
    k = np.where(visited, solve(pi * y, True) / np.where(visited, pi, 1.0), 0.0)
    return h, h2, k


def _power(forward: np.ndarray, exponent: int, pi: np.ndarray) -> np.ndarray:
    """P^exponent by repeated squaring (numpy's matrix_power), stopping once a square has forgotten its start: every
    row pi to FORGOTTEN_POWER, where every higher power is the same (a chain that forgets within tens of lags needs
    six squarings, not thirteen products)."""
    result, base = None, forward
    settled = np.broadcast_to(pi, forward.shape)
    while exponent:
        if exponent & 1:
            result = base if result is None else result @ base
        exponent >>= 1
        if exponent:
            base = base @ base
            if np.abs(base - settled).max() <= FORGOTTEN_POWER:
                return settled.copy()
    return np.eye(len(forward)) if result is None else result


def closed_sums(matrix, pi, y, m: float) -> tuple[np.ndarray, float]:
    """The sums of `batch_given_state` exactly, for a small chain: (sum_{j=1..M} w_j R^j y, Var(N)) with M =
    ceil(m), w_j = min(1, m - j + 1), from the infinite sums (`fundamental`, by a dense LU) less what lies beyond
    the window, a matrix power on them. With a = h - y = sum_{l>=1} P^l y, b = h2 - 2h + y = sum_{s>=1} P^s a, L =
    M - 1 (the lags below m) and Q = P^L:

        sum_{l=1..L} P^l y = a - Q a = S1,   sum_{l=1..L} (L + 1 - l) P^l y = L a - (b - Q b) = S2,
        Var(N) = m C(0) + 2 (pi y) . (S2 + (m - L - 1) S1),
        sum_{j=1..M} R^j y = c - R^M c (c = k - y),   R^M v = D^-1 P^T Q^T D v

    One LU and about log2(M) products of the n x n matrix, where stepping a slowly mixing chain takes hundreds of
    lags (a 16,000-token prompt's chain forgets in 150-400 of its 499). States the chain all but never visits (pi
    below 1e-200) get no sum, as in the stepped one."""
    size = len(y)
    steps = int(np.ceil(m))
    weighted = pi * y
    if steps <= 0:
        return np.zeros(size), m * float(weighted @ y)
    forward = matrix.toarray()
    system = np.eye(size) - forward
    system[:, 0] += 1.0
    lu = lu_factor(system, check_finite=False)
    h, h2, k = _infinite_sums(lambda v, transposed: lu_solve(lu, v, trans=int(transposed), check_finite=False), pi, y)
    visited = pi > 1e-200
    inverse = np.where(visited, 1.0 / np.where(visited, pi, 1.0), 0.0)
    lags = steps - 1
    power = _power(forward, lags, pi)
    a, b = h - y, h2 - 2 * h + y
    below = a - power @ a
    ramp = lags * a - (b - power @ b)
    var_n = m * float(weighted @ y) + 2 * float(weighted @ (ramp + (m - lags - 1) * below))

    def reversed_power(v):  # R^M v
        return inverse * (forward.T @ (power.T @ (pi * v)))

    c = k - y
    sums = c - reversed_power(c) - (1.0 - min(1.0, m - steps + 1)) * reversed_power(y)
    return np.where(visited, sums, 0.0), var_n


def batch_given_state(chains: list, m: float) -> list[tuple[np.ndarray, float]]:
    """The sequences a step decodes, N, given the state its chain is in: per chain (matrix P, law pi, prompts run
    x), (E[N | Q = q_i] per state, Var(N | Q)).

    A prompt decodes its m = OSL - 1 tokens in the m steps after the one that ends it (every step decodes every
    running sequence once), so N_t = sum_{j=1..m} x_{t-j}, a moving sum of the chain's own output: steps that
    carry prompts follow steps that did (the prompts that arrive during a long step make the next one long), so N
    is overdispersed and larger where prompts run. With y = x - E[x], C(l) = E[y_0 y_l] (y's autocovariance,
    C(l) = pi . (y P^l y)) and R the time-reversed chain (R[i, j] = pi_j P[j, i] / pi_i):

        E[N | Q_t = i] = m E[x] + sum_{j=1..m} (R^j y)_i,     Var(N) = m C(0) + 2 sum_{l=1..m-1} (m - l) C(l)

    and Var(N | Q) = Var(N) - Var(E[N | Q]) (total variance). A chain of up to CLOSED_STATES states sums in closed
    form (`closed_sums`); a larger one steps lag by lag until it has forgotten (both terms below FORGOTTEN of x's
    scale), its slowest mode alone is left (the rest geometric), or at PROBE_LAGS it has forgotten long before m
    (the infinite sums, `fundamental`) or is still mixing (`closed_sums`, up to CLOSED_MAX_STATES): the mixing
    time, not m, bounds the work. Each chain is solved on its own (dense where it is small)."""
    out = []
    for matrix, pi, x in chains:
        mean_x = float(pi @ x)
        y = x - mean_x
        sums, var_n = (closed_sums if len(x) <= CLOSED_STATES else _stepped_sums)(matrix, pi, y, m)
        # E[N | Q] is m E[x] plus m reversed-chain averages of y, so it lies in [m min x, m max x]: the clip removes
        # only float noise, which 1 / pi amplifies in states the chain all but never visits (seen: 1e28 there
        # made Var(E[N | Q]) swamp Var(N) on one CPU and not on another)
        conditional = np.clip(m * mean_x + sums, max(m * float(x.min()), 0.0), max(m * float(x.max()), 0.0))
        spread = float(pi @ (conditional - pi @ conditional) ** 2)
        out.append((conditional, max(var_n - spread, 0.0)))
    return out


def _stepped_sums(matrix, pi, y, m: float) -> tuple[np.ndarray, float]:
    """`closed_sums`' (sum_{j=1..M} w_j R^j y, Var(N)) for a larger chain, lag by lag (`batch_given_state`)."""
    scale = max(float(np.max(np.abs(y))), 1e-300)
    var_n = m * float(pi @ (y * y))
    weighted = pi * y
    # states the chain all but never visits (pi below 1e-200) get no reversed row: 1 / pi would overflow
    inverse = np.where(pi > 1e-200, 1.0 / np.maximum(pi, 1e-200), 0.0)
    if len(y) <= DENSE_STATES:  # a small chain steps faster dense (the same products as the sparse ones)
        forward = matrix.toarray()
        backward = (inverse[:, None] * forward.T) * pi[None, :]
    else:
        forward, backward = matrix, (sparse.diags(inverse) @ matrix.T @ sparse.diags(pi)).tocsr()
    forward, backward = stepper(forward), stepper(backward)
    conditional, ahead, behind = np.zeros_like(y), y.copy(), y.copy()
    size, ratios, cov_ratios, cov = scale, [], [], 0.0
    for lag in range(1, int(np.ceil(m)) + 1):
        if lag == PROBE_LAGS + 1 and mixed(size / scale, m):
            # forgotten long before m: the sums to m are the infinite ones (`fundamental`), to 1e-6
            h, h2, k = fundamental(matrix, pi, y)
            return k - y, m * float(pi @ (y * y)) + 2 * (m * float(weighted @ (h - y)) - float(weighted @ (h2 - h)))
        if lag == PROBE_LAGS + 1 and len(y) <= CLOSED_MAX_STATES:
            # still mixing: the sums in closed form (a matrix power) cost less than the hundreds of lags left
            return closed_sums(matrix, pi, y, m)
        behind = backward(behind)
        conditional += min(1.0, m - lag + 1) * behind
        last_cov, cov = cov, 0.0
        if lag < m:
            ahead = forward(ahead)
            cov = float(weighted @ ahead)
            var_n += 2 * (m - lag) * cov
        last, size = size, float(np.abs(behind).max())
        if size < FORGOTTEN * scale and abs(cov) < FORGOTTEN * scale**2:
            break
        ratios.append(size / last if last > 0 else 0.0)
        cov_ratios.append(cov / last_cov if last_cov != 0 else 0.0)
        if len(ratios) < 12 or len(ratios) % 4 or lag >= m:  # settled_ratio's own test, without its call
            continue
        ratio, cov_ratio = settled_ratio(ratios), settled_ratio(cov_ratios)
        if ratio is not None and cov_ratio is not None:
            # the slowest modes alone are left: every further term is the last times its ratio^k; taken where the
            # rest is under TAIL_SHARE of the sums (an error in the ratio then barely shows)
            rest = behind * geometric_sum(ratio, int(np.ceil(m)) - lag)
            rest_var = 2 * cov * ramp_sum(cov_ratio, m - lag)
            if (np.max(np.abs(rest)) <= TAIL_SHARE * (np.max(np.abs(conditional)) + FORGOTTEN * scale)
                    and abs(rest_var) <= TAIL_SHARE * abs(var_n)):  # fmt: skip
                return conditional + rest, var_n + rest_var
    return conditional, var_n


def window_prompts(chains: list, m: float) -> list[tuple[float, float, float]]:
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
        forward = stepper(matrix.toarray() if len(x) <= DENSE_STATES else matrix)  # a small chain steps faster dense
        f, g, z = np.zeros_like(x), np.zeros_like(x), np.ones_like(x)
        idle = (x == 0).astype(float)
        mean = var = 0.0
        last_var_step, last_mean_step, none, decay, done = np.nan, np.nan, 1.0, 1.0, 0
        ratios, var_steps, extrapolated = [], [], False
        for done in range(1, steps + 1):
            ahead = forward(f)
            f, g, z = x + ahead, x * x + 2 * x * ahead + forward(g), idle * forward(z)
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
            if len(ratios) < 12 or len(ratios) % 4:  # settled_ratio's own test, without its call
                continue
            ratio = settled_ratio(ratios)
            if ratio is not None and len(var_steps) >= 3 and done < steps:
                # the slowest mode alone is left: the mean's step nears E[x] and the variance's its limit by ratio^k;
                # taken where what rests on the ratio is under TAIL_SHARE of the result
                left = steps - done
                rest_mean = (mean_step - mean_x) * geometric_sum(ratio, left)
                limit = var_steps[-1] - (var_steps[-1] - var_steps[-2]) * ratio / (1 - ratio)
                rest_var = (var_step - limit) * geometric_sum(ratio, left)
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

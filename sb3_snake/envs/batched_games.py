"""``BatchedGames``: the rules of Snake applied to thousands of games at once, as tensors.

The hot path is a few dozen whole-batch tensor operations with no Python loop over games, on the state laid
out in :mod:`~sb3_snake.envs.batched_state`. The rules, the ``terminal_observation`` (a game that dies keeps its
board from before the fatal move) and the distributions of new food and of starts are those of
:class:`~sb3_snake.SnakeEnv`. Observations are drawn fresh into a new tensor every step, so nothing returned is
ever written again. New food is drawn uniformly from the free cells, never by retrying random cells, and
finished games restart in place. Design notes: docs/design-notes.md, "sb3_snake/envs/batched_games.py".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sb3_snake.envs.batched_state import (
    DIRECTION_ROW,
    EPISODE_ROW,
    FOOD_ROW,
    HEAD_ROW,
    LENGTH_ROW,
    NECK_ROW,
    ONE_HOT_CHANNELS,
    SCORE_ROW,
    STATE_ROWS,
    STEPS_WITHOUT_FOOD_ROW,
    TAIL_ROW,
    copy_rows,
    encode_snakes,
    start_tables,
)
from sb3_snake.envs.rules import (
    BODY,
    COUNTDOWN,
    DEATH_REWARD,
    DIRECTION_DELTAS,
    FOOD_REWARD,
    MAX_COUNTDOWN,
    TURNS,
    SnakeRules,
    absolute_action,
    egocentric_cells,
    long_start_lengths,
    reachable_channel,
    tour_directions,
    tour_variants,
)


@dataclass(frozen=True)
class BatchedStep:
    """One step of all games, as tensors on the env's device.

    ``observations`` are those of the games as they continue (already restarted where a game
    finished). The ``final_*`` fields describe only the games that finished this step, in the
    order of ``final_indices``.
    """

    observations: torch.Tensor  #: (N, C, H, W) uint8
    rewards: torch.Tensor  #: (N,) float32
    terminated: torch.Tensor  #: (N,) bool
    truncated: torch.Tensor  #: (N,) bool
    final_indices: torch.Tensor  #: (M,) int64, games that finished this step
    final_observations: torch.Tensor  #: (M, C, H, W) uint8, their last observation
    final_returns: torch.Tensor  #: (M,) float32, episode return
    final_episode_lengths: torch.Tensor  #: (M,) int64, steps in the episode
    final_scores: torch.Tensor  #: (M,) int64, food eaten
    final_lengths: torch.Tensor  #: (M,) int64, snake length
    final_successes: torch.Tensor  #: (M,) bool, board filled
    final_long_starts: torch.Tensor  #: (M,) bool, began as a long start (not the standard start)


class BatchedGames:
    """``count`` games of Snake on ``device``, stepped and restarted together.

    Inputs are trusted: :class:`~sb3_snake.BatchedSnakeVecEnv` checks what its users give.

    :param rules: the validated game configuration.
    :param count: number of games.
    :param device: where the games live.
    :param seed: seed of the games' random generator (food and restarts), which lives on ``device``.
    :param long_starts: the share of restarts that begin with a long snake instead of the
        standard start (see :meth:`_start_long`), for training the endgame.
    """

    def __init__(self, rules: SnakeRules, count: int, device: torch.device, seed: int, long_starts: float = 0.0):
        self.rules, self.count, self.device = rules, count, device
        cells, dev = rules.num_cells, device
        self._cells = cells
        self._channels = rules.observation_space.shape[0]
        # Link planes of all games plus one scratch row that absorbs the writes of dying games,
        # and a flat view of them for indexed reads and writes.
        self._links = torch.zeros((count + 1, cells), dtype=torch.uint8, device=dev)
        self._links_flat = self._links.view(-1)
        self._link_offsets = torch.arange(count, device=dev) * cells
        # With the countdown: the episode step at which the head entered each cell, laid out as the links.
        self._entered = torch.zeros((count + 1, cells), dtype=torch.int64, device=dev) if rules.countdown else None
        self._scratch_offset = torch.tensor(count * cells, device=dev)
        # Per-game scalars, one row each (see the *_ROW constants of batched_state).
        self._state = torch.zeros((STATE_ROWS, count), dtype=torch.int64, device=dev)
        # Which games began as a long start: their scores are not the standard game's.
        self._long = torch.zeros(count, dtype=torch.bool, device=dev)

        # Moves as lookups: index ``action * 4 + direction`` gives the direction taken (the
        # reversal rule applied), and ``16 * cell + action * 4 + direction`` the cell entered;
        # ``4 * cell + direction`` gives the neighbouring cell (how the tail follows its link).
        turns = torch.as_tensor(TURNS, device=dev)
        self._turn_table = turns.reshape(-1)
        self._link_table = (self._turn_table + 1).to(torch.uint8)  # the link an old head gets
        neighbors = torch.as_tensor(rules.neighbor_table(), device=dev)
        self._move_table = neighbors[:, turns].reshape(-1)
        self._neighbor_table = neighbors.reshape(-1)
        self._start_states, self._start_links, self._start_entered, self._start_free = start_tables(rules, dev)
        # Drawing observations: the state rows of the one-hot channels, and where each game's
        # one-hot channel starts in a flat (N, C, cells) tensor, (4, N).
        self._one = torch.ones((), dtype=torch.uint8, device=dev)
        self._one_hot_rows = torch.tensor([row for _, row in ONE_HOT_CHANNELS], device=dev)
        channel_starts = torch.tensor([channel for channel, _ in ONE_HOT_CHANNELS], device=dev).unsqueeze(1) * cells
        self._one_hot_offsets = channel_starts + torch.arange(count, device=dev) * (self._channels * cells)

        self._reachable = reachable_channel(rules.countdown) if rules.reachable else None
        self._stall_limit = rules.truncation_steps
        self._egocentric_cells = torch.as_tensor(egocentric_cells(rules.board_size), device=dev)
        # Long starts: snakes lying along a closed tour of the board, whose head can follow it.
        self.long_starts = long_starts
        tours = tour_variants(rules.board_size)
        self._tours = torch.as_tensor(tours, device=dev)
        self._tour_directions = torch.as_tensor(tour_directions(tours, rules.board_size), device=dev)
        self._long_lengths = long_start_lengths(rules.board_size)
        self._generator = torch.Generator(device=dev)
        self.seed(seed)
        self.restart(torch.arange(count, device=dev))

    def seed(self, seed: int) -> None:
        """Reseed the generator that draws food and restarts."""
        self._generator.manual_seed(seed)

    @property
    def scores(self) -> torch.Tensor:
        """Food eaten so far in each game's current episode, ``(N,)`` int64."""
        return self._state[SCORE_ROW]

    @property
    def lengths(self) -> torch.Tensor:
        """Each game's current snake length, ``(N,)`` int64."""
        return self._state[LENGTH_ROW]

    def step(self, actions: torch.Tensor) -> BatchedStep:
        """Apply one action per game (``(N,)`` integers from 0 to 3) and restart finished games."""
        links, cells = self._links_flat, self._cells
        previous = self._state
        head, neck, tail, direction, length, food, steps_without_food, score, episode_length = previous.unbind(0)
        actions = actions.to(torch.int64)
        if self.rules.egocentric:
            actions = absolute_action(direction, actions)
        turn = torch.add(direction, actions, alpha=4)
        target = self._move_table.index_select(0, torch.add(turn, head, alpha=16))  # -1: off the board
        direction = self._turn_table.index_select(0, turn)
        off_board = target < 0
        target.clamp_(min=0)
        # The head enters an occupied cell when the body is there and it is not the tail,
        # whose cell is freed this very step (food never lies on the body).
        on_body = links.index_select(0, self._link_offsets + target).bool()
        dies = off_board | (on_body & (target != tail))
        eats = ~dies & (target == food)
        # The old head becomes a body cell linking to the new one; the tail's cell is freed and
        # the tail follows its link, unless the snake eats. Dying games write to the scratch row.
        tail_link = links.index_select(0, self._link_offsets + tail)
        next_tail = self._neighbor_table.index_select(0, torch.add(tail_link.long() - 1, tail, alpha=4))
        rows = torch.where(dies, self._scratch_offset, self._link_offsets)
        head_link = self._link_table.index_select(0, turn)
        links.scatter_(0, torch.cat((rows + tail, rows + head)), torch.cat((tail_link * eats, head_link)))
        if self._entered is not None:
            self._entered.view(-1).scatter_(0, rows + target, episode_length + 1)
        length = length + eats
        wins = eats & (length == cells)
        self._state = torch.stack(
            (
                target,
                head,
                torch.where(eats, tail, next_tail),
                direction,
                length,
                food.masked_fill(wins, -1),
                torch.where(eats, 0, steps_without_food + 1),
                score + eats,
                episode_length + 1,
            )
        )
        eaters = (eats & ~wins).nonzero().squeeze(1)
        if len(eaters):
            self._place_food(eaters)

        rewards = FOOD_REWARD * eats.float() + DEATH_REWARD * dies.float()
        terminated = dies | wins
        stall_limit = self.rules.stall_limit(self._state[LENGTH_ROW]) if self.rules.stall_growth else self._stall_limit
        truncated = ~terminated & (self._state[STEPS_WITHOUT_FOOD_ROW] >= stall_limit)
        finished = (terminated | truncated).nonzero().squeeze(1)
        final_dies = dies.index_select(0, finished)
        # A game that died is shown as it was before the fatal move; the others as they are now.
        final_state = torch.where(final_dies, previous.index_select(1, finished), self._state.index_select(1, finished))
        final_observations = self._view(self._observe(final_state, *self._planes(finished)), final_state)
        final_episode_lengths = self._state[EPISODE_ROW].index_select(0, finished)
        final_long_starts = self._long.index_select(0, finished)
        self.restart(finished)
        return BatchedStep(
            observations=self.observe_in_play(),
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            final_indices=finished,
            final_observations=final_observations,
            final_returns=FOOD_REWARD * final_state[SCORE_ROW].float() + DEATH_REWARD * final_dies.float(),
            final_episode_lengths=final_episode_lengths,
            final_scores=final_state[SCORE_ROW],
            final_lengths=final_state[LENGTH_ROW],
            final_successes=wins.index_select(0, finished),
            final_long_starts=final_long_starts,
        )

    def restart(self, games: torch.Tensor) -> None:
        """Start a new game in each of ``games``, an index tensor from ``nonzero()`` or ``arange``."""
        if len(games) == 0:  # the size of a nonzero() result is known without another device sync
            return
        count, generator, device = len(games), self._generator, self.device
        start = torch.randint(len(self._start_states), (count,), generator=generator, device=device)
        free_choice = torch.randint(self._start_free.shape[1], (count,), generator=generator, device=device)
        state = self._start_states.index_select(0, start).T
        state[FOOD_ROW] = self._start_free[start, free_choice]
        self._state.index_copy_(1, games, state)
        copy_rows(self._links, games, self._start_links.index_select(0, start))
        if self._entered is not None:
            self._entered.index_copy_(0, games, self._start_entered.index_select(0, start))
        self._long.index_fill_(0, games, False)
        if self.long_starts > 0:
            long = games[torch.rand(count, generator=generator, device=device) < self.long_starts]
            if len(long):
                self._start_long(long)
                self._long.index_fill_(0, long, True)

    def _start_long(self, games: torch.Tensor) -> None:
        """Start each of ``games`` with a long snake: a uniformly random length between
        :func:`~sb3_snake.envs.rules.long_start_lengths`, lying along one of the 16 closed tours
        of :func:`~sb3_snake.envs.rules.tour_variants` with its head at a uniformly random point,
        and food on a uniformly random free cell.

        Every such snake is valid and can survive: the cell ahead of its head on the tour is
        free, and following the tour, the head always enters the cell the tail has just left.
        """
        count, generator, device = len(games), self._generator, self.device
        variant = torch.randint(len(self._tours), (count,), generator=generator, device=device)
        tours, directions = self._tours.index_select(0, variant), self._tour_directions.index_select(0, variant)
        tour_length = tours.shape[1]
        low, high = self._long_lengths
        length = torch.randint(low, high + 1, (count,), generator=generator, device=device)
        head = torch.randint(tour_length, (count,), generator=generator, device=device)
        # How far behind the head each point of the tour lies; the body is the first ``length``.
        behind = (head.unsqueeze(1) - torch.arange(tour_length, device=device)).remainder_(tour_length)
        on_body = behind < length.unsqueeze(1)
        links = torch.zeros((count, self._cells), dtype=torch.uint8, device=device)
        links.scatter_(1, tours, ((directions + 1) * (on_body & (behind > 0))).to(torch.uint8))
        copy_rows(self._links, games, links)
        if self._entered is not None:
            entered = torch.zeros((count, self._cells), dtype=torch.int64, device=device)
            self._entered.index_copy_(0, games, entered.scatter_(1, tours, -behind * on_body))

        def at(points: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
            return table.gather(1, points.remainder(tour_length).unsqueeze(1)).squeeze(1)

        state = torch.zeros((STATE_ROWS, count), dtype=torch.int64, device=device)
        state[HEAD_ROW], state[NECK_ROW], state[TAIL_ROW] = (
            at(head, tours),
            at(head - 1, tours),
            at(head - length + 1, tours),
        )
        state[DIRECTION_ROW], state[LENGTH_ROW] = at(head - 1, directions), length
        self._state.index_copy_(1, games, state)
        self._place_food(games)

    def set_state(self, index: int, body: np.ndarray, direction: int, food: tuple[int, int] | None) -> torch.Tensor:
        """Put a snake validated by :meth:`SnakeRules.validate_state` into game ``index``; the
        game's counters start again from zero. Returns that game's observation ``(C, H, W)``."""
        n = self.rules.board_size
        flat_body = (body[:, 0] * n + body[:, 1])[None]
        state, links, entered = encode_snakes(self.rules, flat_body, np.array([direction]), self.device)
        if food is not None:
            state[0, FOOD_ROW] = food[0] * n + food[1]
        self._state[:, index] = state[0]
        self._long[index] = False
        self._links[index] = links[0]
        if self._entered is not None:
            self._entered[index] = entered[0]
        game = torch.tensor([index], device=self.device)
        state = self._state[:, index : index + 1]
        return self._view(self._observe(state, *self._planes(game)), state)[0]

    def observe_in_play(self) -> torch.Tensor:
        """Fresh observations of all games as they are now, ``(N, C, H, W)``: what a policy sees."""
        entered = self._entered[: self.count] if self._entered is not None else None
        return self._view(self._observe(self._state, self._links[: self.count], entered, in_play=True), self._state)

    def observe_first(self, count: int) -> torch.Tensor:
        """The boards of the first ``count`` games (all of them, if fewer) as they are now, for
        drawing: never turned, also when the observations are egocentric."""
        count = min(count, self.count)
        return self._observe(self._state[:, :count], *self._planes(torch.arange(count, device=self.device)))

    def bodies(self, count: int) -> list[list[tuple[int, int]]]:
        """The bodies of the first ``count`` games, head first, as ``(row, col)`` cells, for drawing.

        The order is the link plane's: from the tail, each link names the direction of the next
        cell towards the head.
        """
        count = min(count, self.count)
        n = self.rules.board_size
        links = self._links[:count].cpu().numpy()
        state = self._state[:, :count].cpu().numpy()
        bodies = []
        for game in range(count):
            cell, head = int(state[TAIL_ROW, game]), int(state[HEAD_ROW, game])
            cells = [cell]
            while cell != head and len(cells) <= n * n:
                d_row, d_col = DIRECTION_DELTAS[int(links[game, cell]) - 1]
                cell = (cell // n + int(d_row)) * n + cell % n + int(d_col)
                cells.append(cell)
            bodies.append([divmod(c, n) for c in reversed(cells)])
        return bodies

    def _planes(self, games: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The link planes of ``games`` and, with the countdown, their entry-step planes."""
        entered = self._entered.index_select(0, games) if self._entered is not None else None
        return self._links.index_select(0, games), entered

    def _observe(
        self, state: torch.Tensor, links: torch.Tensor, entered: torch.Tensor | None, in_play: bool = False
    ) -> torch.Tensor:
        """Fresh observations ``(M, C, H, W)`` of the games with these state columns and planes.

        :param state: ``(rows, M)`` columns of per-game state.
        :param links: ``(M, cells)`` link planes.
        :param entered: ``(M, cells)`` entry-step planes with the countdown, else None.
        :param in_play: these are all ``N`` games, ready for their next move: every game has food
            then (only a finished game may have filled the board).
        """
        count, n = len(links), self.rules.board_size
        observations = torch.zeros((count, self._channels, self._cells), dtype=torch.uint8, device=self.device)
        torch.minimum(links, self._one, out=observations[:, BODY])  # links are 0 or 1 + direction
        if entered is not None:  # moves until free: entered + length - now, on the body cells
            moves = entered + (state[LENGTH_ROW] - state[EPISODE_ROW]).unsqueeze(1)
            observations[:, COUNTDOWN] = moves.clamp_(0, MAX_COUNTDOWN).to(torch.uint8) * observations[:, BODY]
        cells = state.index_select(0, self._one_hot_rows)  # head, neck, tail and food
        if in_play:
            offsets, values = self._one_hot_offsets, self._one.expand(cells.numel())
        else:
            # The first ``count`` columns of the offsets of all games fit any ``count`` games.
            offsets, values = self._one_hot_offsets[:, :count], (cells >= 0).view(-1).byte()  # food -1: none
            cells = cells.clamp(min=0)
        observations.view(-1).scatter_(0, (offsets + cells).view(-1), values)
        if self._reachable is not None:
            observations[:, self._reachable] = self._reached(state, links)
        return observations.view(count, self._channels, n, n)

    def _reached(self, state: torch.Tensor, links: torch.Tensor) -> torch.Tensor:
        """``(M, cells)`` uint8: the cells each game's head can reach through cells free now, the
        tail's counted free (:class:`~sb3_snake.envs.rules.SnakeRules`' ``reachable``).

        A flood from the head, a run at a time: a run is a stretch of a row or a column between
        blocked cells (or walls). Each round marks every run that holds a reached cell, along the
        rows and then along the columns (one ``index_add`` and one gather each), until a round
        marks nothing new (a host sync per round). A path that turns ``k`` times is flooded in
        about ``k`` rounds: a few on a board with room, more along a winding corridor. Flooding
        a cell at a time takes as many rounds as the longest path, each about as costly, since
        a round's cost is its few whole-batch operations, not the cells.
        """
        count, cells = links.shape
        n, device = self.rules.board_size, self.device
        games, head = torch.arange(count, device=device), state[HEAD_ROW]
        passable = links == 0  # free cells and the head, whose link is 0 too
        passable[games, state[TAIL_ROW]] = True
        passable[games, head] = False
        reached = torch.zeros_like(passable)
        reached[games, head] = True
        conducts = (passable | reached).view(count, n, n)
        blocked = ~conducts
        # Each cell's run along its row and along its column: the line it lies on (game and row,
        # or game and column) and the blocked cells before it on that line; unique in the batch.
        lines = torch.arange(count * n, device=device) * (n + 1)
        runs = (
            (lines.view(count, n, 1) + blocked.cumsum(2)).view(-1),
            (lines.view(count, 1, n) + blocked.cumsum(1)).view(-1),
        )
        flat, marked = conducts.view(-1), reached.view(-1).long()
        total = int(marked.sum())
        for _ in range(cells):
            for run in runs:
                hits = torch.zeros(count * n * (n + 1), dtype=torch.int64, device=device).index_add_(0, run, marked)
                marked = (hits.index_select(0, run) > 0).logical_and_(flat).long()
            now = int(marked.sum())
            if now == total:
                break
            total = now
        return (marked.view(count, cells).bool() & passable).to(torch.uint8)

    def _view(self, observations: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """``observations`` as the policy sees them: unchanged, or with ``egocentric`` each board
        turned so that its snake moves up (one gather through :func:`egocentric_cells`)."""
        if not self.rules.egocentric:
            return observations
        count, channels, n, _ = observations.shape
        cells = self._egocentric_cells.index_select(0, state[DIRECTION_ROW]).unsqueeze(1).expand(-1, channels, -1)
        return observations.view(count, channels, n * n).gather(2, cells).view(count, channels, n, n)

    def _place_food(self, games: torch.Tensor) -> None:
        """Put food on a uniformly random free cell of each of ``games``; each must have one."""
        free = self._links.index_select(0, games) == 0
        free.scatter_(1, self._state[HEAD_ROW].index_select(0, games).unsqueeze(1), False)
        free_count = free.sum(dim=1)
        uniform = torch.rand(len(games), generator=self._generator, device=self.device, dtype=torch.float64)
        k = (uniform * free_count).long().clamp_(max=free_count - 1)
        # The (k+1)-th free cell is the first whose running count of free cells exceeds k.
        food = (free.cumsum(dim=1) <= k.unsqueeze(1)).sum(dim=1)
        self._state[FOOD_ROW].index_copy_(0, games, food)

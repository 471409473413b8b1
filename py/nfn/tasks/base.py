"""The Task interface: rows of a data source as conversations, sliced like a Python list.

A task knows how many rows its source has (num_rows) and how to build row i as a fresh
conversation dict (get_row). `start`/`stop`/`step` select rows exactly as
`range(num_rows)[start:stop:step]` would, with the same errors for bad values; indexing
returns a deep copy, so changing a returned row never changes the task.
"""
import bisect
import copy
import operator


class Task:
    def __init__(self, start=None, stop=None, step=None):
        def index(name, value):  # what a slice of a range takes: None or an integer (__index__)
            try:
                return None if value is None else operator.index(value)
            except TypeError:
                raise TypeError(f"{type(self).__name__}: {name} must be an int or None, "
                                f"got {value!r}") from None

        start, stop, step = index("start", start), index("stop", stop), index("step", step)
        if step == 0:
            raise ValueError(f"{type(self).__name__}: step must not be zero")
        self._slice = slice(start, stop, step)
        self._indices = None

    # -- what a concrete task provides ---------------------------------------------------
    def num_rows(self):
        raise NotImplementedError

    def get_row(self, index):
        """Row `index` of the whole source (before slicing), as a conversation dict."""
        raise NotImplementedError

    def evaluate(self, row, completion):
        """1 if the assistant's completion answers the row correctly, else 0."""
        raise NotImplementedError

    # -- the sliced view -----------------------------------------------------------------
    @property
    def indices(self):
        if self._indices is None:
            self._indices = range(self.num_rows())[self._slice]
        return self._indices

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"{type(self).__name__} indices must be integers, got {type(i).__name__}")
        return copy.deepcopy(self.get_row(self.indices[i]))  # IndexError like a list

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        return f"{type(self).__name__}({len(self)} rows)"


class ConcatTask(Task):
    """Tasks one after another, in order; locate(i) says which task and row i came from."""

    def __init__(self, tasks, start=None, stop=None, step=None):
        super().__init__(start, stop, step)
        self.tasks = list(tasks)
        if not self.tasks:
            raise ValueError("ConcatTask needs at least one task")
        self._ends = []
        total = 0
        for t in self.tasks:
            total += len(t)
            self._ends.append(total)

    def num_rows(self):
        return self._ends[-1]

    def locate(self, i):
        """(task number, index within that task) of row i of this view."""
        flat = self.indices[i]
        k = bisect.bisect_right(self._ends, flat)
        return k, flat - (self._ends[k - 1] if k else 0)

    def get_row(self, index):
        k = bisect.bisect_right(self._ends, index)
        return self.tasks[k][index - (self._ends[k - 1] if k else 0)]

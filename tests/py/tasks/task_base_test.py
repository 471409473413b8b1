"""Task slicing behaves exactly like Python list slicing; rows are independent copies;
concatenation keeps each task's own indexing."""
import itertools
import unittest

from nfn.tasks.base import ConcatTask, Task


class Numbers(Task):
    def __init__(self, n, **slicing):
        super().__init__(**slicing)
        self.n = n
        self.source = [{"messages": [{"role": "user", "content": str(i)}], "i": i} for i in range(n)]

    def num_rows(self):
        return self.n

    def get_row(self, index):
        return self.source[index]


class TaskTest(unittest.TestCase):
    def test_slicing_matches_python_lists(self):
        values = [None, -12, -3, -1, 0, 1, 2, 5, 9, 10, 30]
        steps = [None, 1, 2, 3, -1, -2]
        reference = list(range(10))
        for start, stop, step in itertools.product(values, values, steps):
            task = Numbers(10, start=start, stop=stop, step=step)
            want = reference[start:stop:step]
            self.assertEqual([row["i"] for row in task], want, (start, stop, step))
            self.assertEqual(len(task), len(want))

    def test_bad_slices_raise(self):
        with self.assertRaises(ValueError):
            Numbers(5, step=0)
        for bad in ("1", 1.0, [1]):
            with self.assertRaises(TypeError):
                Numbers(5, start=bad)
            with self.assertRaises(TypeError):
                Numbers(5, stop=bad)

    def test_slice_values_are_what_range_takes(self):
        class Index:  # an integer by __index__, as numpy's integers are
            def __index__(self):
                return 2

        reference = range(10)
        for start in (Index(), True, False):
            task = Numbers(10, start=start, stop=Index(), step=True)
            self.assertEqual([row["i"] for row in task], list(reference[start:Index():True]))

    def test_indexing(self):
        task = Numbers(10, start=2, step=3)  # rows 2, 5, 8
        self.assertEqual([task[0]["i"], task[1]["i"], task[-1]["i"]], [2, 5, 8])
        for bad in (3, -4):
            with self.assertRaises(IndexError):
                task[bad]
        with self.assertRaises(TypeError):
            task["0"]

    def test_rows_are_independent(self):
        task = Numbers(3)
        row = task[1]
        row["messages"][0]["content"] = "changed"
        row["i"] = 99
        self.assertEqual(task[1], {"messages": [{"role": "user", "content": "1"}], "i": 1})
        self.assertIsNot(task[1], task[1])

    def test_concat_keeps_order_and_per_task_indexing(self):
        a, b, c = Numbers(3), Numbers(0), Numbers(4, start=1)
        both = ConcatTask([a, b, c])
        self.assertEqual(len(both), 6)
        self.assertEqual([r["i"] for r in both], [0, 1, 2, 1, 2, 3])
        self.assertEqual([both.locate(i) for i in range(6)],
                         [(0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (2, 2)])
        sliced = ConcatTask([a, c], start=-3, step=2)
        self.assertEqual([r["i"] for r in sliced], [1, 3])
        self.assertEqual(sliced.locate(1), (1, 2))
        row = both[0]
        row["i"] = -1
        self.assertEqual(a[0]["i"], 0)
        with self.assertRaises(ValueError):
            ConcatTask([])


if __name__ == "__main__":
    unittest.main()

"""Artifact and cache locations: defaults under $HOME, each moved by its variable."""
import os
import unittest
from unittest import mock

from nfn import paths


class PathsTest(unittest.TestCase):
    def test_defaults(self):
        env = {k: v for k, v in os.environ.items()
               if k not in (paths.ARTIFACTS_ENV, paths.ARTIFACTS_ENV_ALIAS, paths.DATASETS_ENV, paths.TOKENIZERS_ENV)}
        env["HOME"] = "/home/someone"
        with mock.patch.dict(os.environ, env, clear=True):
            self.assertEqual(paths.artifacts_dir(), "/home/someone/NeuralFn/artifacts")
            self.assertEqual(paths.datasets_dir(), "/home/someone/.cache/nfn/datasets")
            self.assertEqual(paths.tokenizers_dir(), "/home/someone/.cache/nfn/tokenizers")

    def test_overrides(self):
        env = {paths.ARTIFACTS_ENV: "/a/art", paths.DATASETS_ENV: "/d/ds",
               paths.TOKENIZERS_ENV: "~/tok", "HOME": "/h"}
        with mock.patch.dict(os.environ, env):
            self.assertEqual(paths.artifacts_dir(), "/a/art")
            self.assertEqual(paths.datasets_dir(), "/d/ds")
            self.assertEqual(paths.tokenizers_dir(), "/h/tok")

    def test_artifacts_alias(self):
        # NEURALFN_ARTIFACTS_DIR is read where NFN_ARTIFACTS_DIR is unset or blank; set, the new name wins.
        env = {k: v for k, v in os.environ.items() if k not in (paths.ARTIFACTS_ENV, paths.ARTIFACTS_ENV_ALIAS)}
        with mock.patch.dict(os.environ, env, clear=True):
            os.environ["NEURALFN_ARTIFACTS_DIR"] = "/old/art"
            self.assertEqual(paths.artifacts_dir(), "/old/art")
            os.environ["NFN_ARTIFACTS_DIR"] = " "
            self.assertEqual(paths.artifacts_dir(), "/old/art")
            os.environ["NFN_ARTIFACTS_DIR"] = "/new/art"
            self.assertEqual(paths.artifacts_dir(), "/new/art")

    def test_empty_variable_means_default(self):
        with mock.patch.dict(os.environ, {paths.DATASETS_ENV: "  ", "HOME": "/h"}):
            self.assertEqual(paths.datasets_dir(), "/h/.cache/nfn/datasets")


if __name__ == "__main__":
    unittest.main()

"""tdyn.power, tdyn.jacobian and tdyn.topology take their samples the same way: ids (a list of id lists, or one
list: one sample), else data or prompt drawn as the CLI draws them; ids and the same samples drawn from text give
the same results, and a wrong combination is an error naming it."""
import pathlib
import tempfile
import unittest

import numpy as np

import tdyn
from support import have_shared, missing_shared, shared

STORIES = "models/stories260K/stories260K.bin"
CORPUS = "data/wikitext-2/wiki.test.raw"


class SampleArgsTest(unittest.TestCase):
    def setUp(self):
        if not have_shared(STORIES) or not have_shared(CORPUS):
            self.skipTest(missing_shared(STORIES))
        self.model = tdyn.load(str(shared(STORIES)))
        self.corpus = str(shared(CORPUS))
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="tdyn_sample_args_"))

    def test_ids_and_an_ids_file_agree(self):
        ids = [[1, 403, 407, 261, 378, 270, 449, 265], [1, 60, 70, 80, 90], [1, 300, 301, 302, 303, 304, 305]]
        path = self.tmp / "samples.ids"
        path.write_text("".join(" ".join(map(str, s)) + "\n" for s in ids))
        given = tdyn.jacobian(self.model, ids)
        drawn = tdyn.jacobian(self.model, data=str(path), min_len=1)
        np.testing.assert_array_equal(given["samples.source_index"], [0, 1, 2])
        np.testing.assert_array_equal(drawn["samples.source_index"], [0, 1, 2])
        np.testing.assert_array_equal(given["mean_jacobians"], drawn["mean_jacobians"])
        topo_given = tdyn.topology(self.model, ids, coupling=False)
        topo_drawn = tdyn.topology(self.model, data=str(path), min_len=1, coupling=False)
        np.testing.assert_array_equal(topo_given["membership"], topo_drawn["membership"])
        power_given = tdyn.power(self.model, ids, iterate=False, steer=False)
        power_drawn = tdyn.power(self.model, data=str(path), min_len=1, iterate=False, steer=False)
        np.testing.assert_array_equal(power_given["alignment_after"], power_drawn["alignment_after"])

    def test_text_is_drawn_as_the_cli_draws_it(self):
        run = tdyn.jacobian(self.model, data=self.corpus, samples=3, max_len=16)
        self.assertEqual(run["samples.source_index"].shape, (3,))
        prompt = tdyn.topology(self.model, prompt="Once upon a time there was a little girl named Lily.", coupling=False)
        self.assertEqual(prompt["results"]["samples"], 1)

    def test_one_list_is_one_sample(self):
        one = [1, 403, 407, 261, 378, 270, 449, 265]
        for f in (tdyn.power, tdyn.jacobian, tdyn.topology):
            kwargs = {"iterate": False, "steer": False} if f is tdyn.power else {"coupling": False} if f is tdyn.topology else {}
            flat, nested = f(self.model, one, **kwargs), f(self.model, [one], **kwargs)
            self.assertEqual(flat["results"], nested["results"], f.__name__)
        jac_flat, jac_nested = tdyn.jacobian(self.model, one), tdyn.jacobian(self.model, [one])
        np.testing.assert_array_equal(jac_flat["mean_jacobians"], jac_nested["mean_jacobians"])
        np.testing.assert_array_equal(tdyn.jacobian(self.model, np.array([one]))["mean_jacobians"], jac_nested["mean_jacobians"])

    def test_ids_are_analysed_whole(self):
        # samples and max_len bound what is drawn from data; every sample given as ids is analysed, to its end.
        ids = [[1, 403, 407, 261, 378, 270, 449, 265], [1, 60, 70, 80, 90]]
        whole = tdyn.jacobian(self.model, ids, positions="all")
        bounded = tdyn.jacobian(self.model, ids, positions="all", samples=1, max_len=4)
        np.testing.assert_array_equal(bounded["samples.source_index"], [0, 1])
        np.testing.assert_array_equal(whole["mean_jacobians"], bounded["mean_jacobians"])

    def test_without_data_the_shipped_corpus_is_drawn(self):
        corpus = pathlib.Path(tdyn.default_corpus())
        self.assertEqual(corpus.read_bytes(), pathlib.Path(self.corpus).read_bytes())  # the WikiText-2 test split
        default = tdyn.jacobian(self.model, samples=6, max_len=16)
        given = tdyn.jacobian(self.model, data=str(corpus), samples=6, max_len=16)
        self.assertEqual(len(default["samples.source_index"]), 6)
        np.testing.assert_array_equal(default["samples.source_index"], given["samples.source_index"])
        np.testing.assert_array_equal(default["mean_jacobians"], given["mean_jacobians"])

    def test_errors_name_the_argument(self):
        for f in (tdyn.power, tdyn.jacobian, tdyn.topology):
            with self.assertRaisesRegex(tdyn.Error, "one way: ids, data or prompt"):
                f(self.model, [[1, 2, 3]], prompt="Once upon a time")
            with self.assertRaisesRegex(tdyn.Error, "ids: expected a list of token ids"):
                f(self.model, "1,2,3")
            with self.assertRaisesRegex(tdyn.Error, "no samples"):
                f(self.model, [])


if __name__ == "__main__":
    unittest.main()

"""tdyn.load / Model: the forward pass and its hooks against the CLI's saved .npy files and the fixtures'
float64 references, layer matrices, Jacobians, generation, the tokenizer, and errors."""
import json
import pathlib
import subprocess
import tempfile
import unittest

import numpy as np

import support
import tdyn

FIXTURES = "fixtures"
STORIES = "models/stories260K"


def fixture(family):
    return str(support.shared(f"{FIXTURES}/{family}"))


def refs(family):
    return support.read_safetensors(support.shared(f"{FIXTURES}/{family}/refs.safetensors"))


@unittest.skipUnless(support.have_shared(FIXTURES), support.missing_shared(FIXTURES))
class ForwardTest(unittest.TestCase):
    def test_model_description(self):
        m = tdyn.load(fixture("llama"))
        self.assertEqual(m.family, "llama")
        self.assertEqual(m.config["d_model"], 64)
        self.assertEqual(m.config["n_layers"], 3)
        self.assertEqual((m.config["n_heads"], m.config["n_kv_heads"]), (4, 2))
        self.assertEqual(m.source_config["model_type"], "llama")
        self.assertGreater(m.parameter_count, 0)
        self.assertIn("llama", repr(m))

    @unittest.skipUnless(support.cli(), "the tdyn CLI is not built (TDYN_CLI unset)")
    def test_hooks_equal_the_cli(self):
        for family in ("gpt2", "llama"):
            ids = [int(i) for i in refs(family)["seq1.input_ids"]]
            with tempfile.TemporaryDirectory() as out:
                subprocess.run([support.cli(), "run", fixture(family), "--ids", ",".join(map(str, ids)),
                                "--max-new-tokens", "0", "--save-hooks", out],
                               check=True, capture_output=True)
                index = json.loads(pathlib.Path(out, "index.json").read_text())
                m = tdyn.load(fixture(family))
                logits, hooks = m.run(ids)
                self.assertEqual(sorted(hooks), sorted(index), family)
                for name, entry in index.items():
                    saved = np.load(f"{out}/{entry['file']}")
                    self.assertEqual(hooks[name].dtype, np.float32, name)
                    support.assert_close(self, hooks[name], saved, 1e-6, 1e-6, f"{family} {name}")
                self.assertEqual(logits.shape, (len(ids), m.config["d_vocab"]))

    def test_logits_and_residual_stream_match_references(self):
        r = refs("gpt2")
        m = tdyn.load(fixture("gpt2"))
        logits, hooks = m.run(r["seq0.input_ids"], hooks="blocks.*.hook_resid_post")
        self.assertEqual(sorted(hooks), [f"blocks.{l}.hook_resid_post" for l in range(3)])
        support.assert_close_to_ref(self, logits, r["seq0.logits"], 1e-4, 2e-5, "logits")
        for l in range(3):
            name = f"blocks.{l}.hook_resid_post"
            support.assert_close_to_ref(self, hooks[name], r[f"seq0.{name}"], 1e-4, 2e-5, name)

    def test_packed_weights_give_the_same_logits(self):
        """pack_weights=True: products take packed copies (GPT-2's Conv1D layout here); the logits are the
        unpacked model's up to float32 round-off, and the same at every prompt."""
        if not tdyn.packed_products:
            self.skipTest("tdyn was built without oneDNN's packed kernels")
        r = refs("gpt2")
        ids = r["seq0.input_ids"]
        plain = tdyn.load(fixture("gpt2")).run(ids)[0]
        packed = tdyn.load(fixture("gpt2"), pack_weights=True)
        first, second = packed.run(ids)[0], packed.run(ids)[0]
        np.testing.assert_array_equal(first, second)
        support.assert_close(self, first, plain, 1e-5, 1e-5, "packed against unpacked logits")
        support.assert_close_to_ref(self, first, r["seq0.logits"], 1e-4, 2e-5, "packed logits")

    def test_token_types(self):
        r = refs("bert")
        m = tdyn.load(fixture("bert"))
        logits, hooks = m.run(r["seq1.input_ids"], hooks="blocks.1.hook_resid_post",
                              token_types=r["seq1.token_type_ids"])
        support.assert_close_to_ref(self, hooks["blocks.1.hook_resid_post"], r["seq1.blocks.1.hook_resid_post"],
                                    1e-4, 2e-5, "bert resid_post with token types")
        _, none = m.run(r["seq1.input_ids"], hooks=None)
        self.assertEqual(none, {})
        with self.assertRaisesRegex(tdyn.Error, r"'blocks\.\*\.hook_nonexistent' matches no hook"):
            m.run(r["seq1.input_ids"], hooks="blocks.*.hook_nonexistent")

    def test_edit_patches_ablates_and_refuses(self):
        m = tdyn.load(fixture("llama"))
        a, b = [5, 17, 42, 9, 3, 11, 2], [7, 2, 19, 33, 6, 1, 12]
        name = "blocks.1.hook_resid_post"
        # Activation patching from a second prompt: the whole stream after layer 1 is b's, so are the logits.
        logits_b, source = m.run(b, hooks=name)
        logits, acts = m.run(a, hooks=name, edit={name: lambda x: source[name]})
        np.testing.assert_array_equal(logits, logits_b)
        np.testing.assert_array_equal(acts[name], source[name])
        # An edit that returns None leaves the activation as it is.
        np.testing.assert_array_equal(m.run(a, hooks=None, edit={name: lambda x: None})[0], m.run(a, hooks=None)[0])

        # One head's ablation through attn.hook_z removes its share z_h W_O[:, h]^T of the output projection, in
        # float64 from the checkpoint's own o_proj.
        hd, head = m.config["d_head"], 2
        out = "blocks.1.attn.hook_out_proj"
        _, clean = m.run(a, hooks=f"blocks.1.attn.hook_z,{out}")

        def ablate(z):
            z = z.copy()
            z[:, head, :] = 0
            return z
        _, ablated = m.run(a, hooks=out, edit={"blocks.1.attn.hook_z": ablate})
        w_o = support.read_safetensors(support.shared(f"{FIXTURES}/llama/model.safetensors"))[
            "model.layers.1.self_attn.o_proj.weight"].astype(np.float64)
        share = clean["blocks.1.attn.hook_z"][:, head, :].astype(np.float64) @ w_o[:, head * hd:(head + 1) * hd].T
        support.assert_close(self, clean[out].astype(np.float64) - ablated[out], share, 1e-5, 1e-5, "head share")

        with self.assertRaisesRegex(tdyn.Error, r"'blocks\.0\.attn\.hook_pattern' matches no writable hook"):
            m.run(a, edit={"blocks.0.attn.hook_pattern": lambda x: x})
        with self.assertRaisesRegex(tdyn.Error, r"edit of blocks\.1\.hook_resid_post: the function returned shape"):
            m.run(a, edit={name: lambda x: x[:-1]})
        with self.assertRaisesRegex(tdyn.Error, r"expected a float array"):
            m.run(a, edit={name: lambda x: "no"})

        def broken(x):
            raise ValueError("edit failed on purpose")
        with self.assertRaisesRegex(ValueError, "on purpose"):
            m.run(a, edit={name: broken})

    def test_layer_matrix(self):
        for family in ("gpt2", "llama"):
            r, m = refs(family), tdyn.load(fixture(family))
            for l in range(m.config["n_layers"]):
                f, c = m.layer_matrix(l)
                self.assertEqual(f.dtype, np.float64)
                f_ref, c_ref = r[f"blocks.{l}.layer_matrix"], r[f"blocks.{l}.layer_matrix_bias"]
                support.assert_close_to_ref(self, f, f_ref, 1e-5, 1e-6, f"{family} F_{l}")
                # Llama has no biases: c is exactly 0 there, so its scale comes from F.
                support.assert_close(self, c, c_ref, 1e-5, 1e-6 * np.max(np.abs(f_ref)), f"{family} c_{l}")

    def test_jacobians_match_references(self):
        r, m = refs("llama"), tdyn.load(fixture("llama"))
        jac = m.jacobians(r["seq0.input_ids"], positions=[5, -1])
        self.assertEqual(len(jac), 2 * 3 * 3)
        for p in (5, 23):
            for l in range(3):
                for kind in ("jac_attn", "jac_mlp", "jac_block"):
                    key = f"pos{p}.blocks.{l}.{kind}"
                    support.assert_close_to_ref(self, jac[key], r[f"seq0.{key}"], 1e-3, 5e-5, key)

    @unittest.skipUnless(support.cli(), "the tdyn CLI is not built (TDYN_CLI unset)")
    def test_jacobians_equal_the_cli(self):
        ids = refs("llama")["seq0.input_ids"]
        m = tdyn.load(fixture("llama"))
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([support.cli(), "jacobian", fixture("llama"), "--ids", ",".join(map(str, ids)),
                            "--positions", "5,-1", "--save-per-sample", "--quiet", "--out", out],
                           check=True, capture_output=True)
            jac = m.jacobians(ids, positions=[5, -1])
            for p in (5, 23):
                for l in range(3):
                    for kind in ("attn", "mlp"):
                        saved = np.load(f"{out}/per_sample/sample0.pos{p}.blocks.{l}.jac_{kind}.npy")
                        key = f"pos{p}.blocks.{l}.jac_{kind}"
                        support.assert_close(self, jac[key], saved, 1e-9, 1e-9 * np.max(np.abs(saved)), key)
            means = m.mean_jacobians([ids], positions=[5, -1])["mean"]
            saved = np.load(f"{out}/mean_jacobians.npy")
            self.assertEqual(saved.shape, (len(means), 64, 64))
            for k, (name, mean) in enumerate(means.items()):
                support.assert_close(self, mean, saved[k], 1e-9, 1e-9 * np.max(np.abs(saved[k])), name)

    def test_mean_jacobians_of_one_sample_equal_its_jacobians(self):
        r, m = refs("llama"), tdyn.load(fixture("llama"))
        ids = r["seq1.input_ids"]
        plain = m.jacobians(ids)  # last position
        means = m.mean_jacobians([ids], mean_of_products=True)
        self.assertEqual((means["n_samples"], means["n_pairs"]), (1, 1))
        self.assertEqual(list(means["mean"]), [f"blocks.{l}.jac_{s}" for l in range(3) for s in ("attn", "mlp")])
        last = len(ids) - 1
        for name, mean in means["mean"].items():
            support.assert_close(self, mean, plain[f"pos{last}.{name}"], 1e-9, 1e-9, name)
        product = np.eye(64)
        for name, mean in means["mean"].items():
            product = mean @ product
            support.assert_close(self, means["mean_of_products"][name], product, 1e-9, 1e-9, f"product {name}")

    def test_read_safetensors_matches_numpy(self):
        ours = tdyn.read_safetensors(str(support.shared(f"{FIXTURES}/gpt2/refs.safetensors")))
        theirs = refs("gpt2")
        self.assertEqual(sorted(ours), sorted(theirs))
        for name in ("seq0.input_ids", "blocks.0.layer_matrix", "seq0.logits"):
            self.assertEqual(ours[name].dtype, theirs[name].dtype)
            np.testing.assert_array_equal(ours[name], theirs[name])


@unittest.skipUnless(support.have_shared(STORIES), support.missing_shared(STORIES))
class GenerationTest(unittest.TestCase):
    def test_greedy_generation_and_tokenizer_match_llama2c(self):
        m = tdyn.load(str(support.shared(f"{STORIES}/stories260K.bin")))
        tok = m.tokenizer()
        prompt = np.load(support.shared(f"{STORIES}/prompt_tokens_once_upon_a_time.npy"))
        self.assertEqual(tok.encode("Once upon a time"), prompt.tolist())
        fed = np.load(support.shared(f"{STORIES}/input_tokens_once_upon_a_time_n64.npy"))
        tokens = m.generate(prompt, max_new_tokens=len(fed) - len(prompt) + 1)
        self.assertEqual(tokens[:len(fed)], fed.tolist())
        self.assertTrue(tok.decode(tokens).startswith("Once upon a time, there was a little girl named Lily."))
        self.assertEqual(m.generate(prompt, 0), prompt.tolist())

    def test_sampling_is_reproducible(self):
        m = tdyn.load(str(support.shared(f"{STORIES}/stories260K.bin")))
        a = m.generate([1], 20, temperature=1.0, seed=7)
        self.assertEqual(a, m.generate([1], 20, temperature=1.0, seed=7))
        self.assertEqual(a[0], 1)


@unittest.skipUnless(support.have_shared(FIXTURES), support.missing_shared(FIXTURES))
class ErrorTest(unittest.TestCase):
    def test_errors_raise_tdyn_error_with_the_message(self):
        with self.assertRaisesRegex(tdyn.Error, "no-such-model"):
            tdyn.load("/nonexistent/no-such-model")
        m = tdyn.load(fixture("gpt2"))
        with self.assertRaisesRegex(tdyn.Error, "outside the vocabulary"):
            m.run([1, 2, 100000])
        with self.assertRaisesRegex(tdyn.Error, "layer 7"):
            m.layer_matrix(7)
        with self.assertRaisesRegex(tdyn.Error, "position 9"):
            m.jacobians([1, 2, 3], positions=9)
        with self.assertRaisesRegex(tdyn.Error, "positions"):
            m.jacobians([1, 2, 3], positions="first")
        with self.assertRaises(tdyn.Error):
            m.run([])
        self.assertTrue(issubclass(tdyn.Error, RuntimeError))

    def test_bert_does_not_generate(self):
        with self.assertRaisesRegex(tdyn.Error, "encoder"):
            tdyn.load(fixture("bert")).generate([1, 2], 3)


if __name__ == "__main__":
    unittest.main()

// The trainer's answers about checkpoints, as JSON on stdout, so that `nfn` (Python) asks the
// code that writes and resumes checkpoints instead of deciding again:
//
//   nfn_gpt_native_train --inspect-checkpoint SPEC [--for-resume] [--artifacts-dir DIR]
//                        [--resolve-only] [--json]
//     which checkpoint SPEC names (find_checkpoint): kind, path, step, manifest_file and its
//     manifest; for an llm.c file also its header and every tensor's place in it, unless
//     --resolve-only (which reads no model file: the choice and its manifest alone).
//   nfn_gpt_native_train --inspect-geometry --max-seq-len T --vocab-size V --num-layers L
//                        --num-heads H --channels C [--padded-vocab-size P] [--json]
//     the model of that geometry: the padded vocabulary (pad_vocab where P is not given), the
//     parameter count and the tensors' shapes and places in the parameter block.
//
// The dispatcher nfn_native_train passes both to the family's trainer: a checkpoint's format
// is its family's, and these are GPT's.
#pragma once

namespace nfn {

// Whether argv asks one of the queries above (and not for a training run).
bool is_checkpoint_query(int argc, char** argv);
// Answers it: 0, or 1 with one line on stderr (2 for a bad flag).
int run_checkpoint_query(const char* program, int argc, char** argv);

}  // namespace nfn

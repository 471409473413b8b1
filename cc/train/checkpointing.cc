#include "cc/train/checkpointing.h"

#include "cc/ckpt/checkpoint.h"
#include "cc/ckpt/packing_state.h"
#include "cc/train/manifest.h"
#include "cc/util/files.h"

namespace nfn {

namespace {

using Stored = TrainableModel::Stored;

// A checkpoint's tensors streamed straight between the files and the model's memory.
FloatSource from_model(TrainableModel& model, Stored which) {
  return [&model, which](size_t offset, size_t count, float* dst, std::string* error) {
    return model.download(which, offset, count, dst, error);
  };
}
FloatSink into_model(TrainableModel& model, Stored which) {
  return [&model, which](size_t offset, size_t count, const float* src, std::string* error) {
    return model.upload(which, offset, count, src, error);
  };
}

// A best-fit run's packing state (the documents its sampler read ahead); a contiguous run's
// step has none, so one an earlier best-fit run left for this step goes.
bool write_packing(const TrainConfig& c, int step, const data::BatchSampler& sampler, std::string* error) {
  const std::string path = join_path(c.output_dir, packing_file_name(step));
  const std::vector<data::DocumentSpan>* buffered = sampler.read_ahead();
  if (buffered == nullptr) return remove_file(path, error);
  PackingState state;
  state.step = step;
  state.bos = c.eot_token;
  state.row_tokens = c.seq_len + 1;
  state.buffer_size = c.packing_buffer;
  state.buffered = *buffered;
  return write_packing_file(path, state, error);
}

}  // namespace

bool save_checkpoint(const TrainConfig& c, ModelFamily& family, int step, const std::string& run_id, const Rng& rng,
                     const data::BatchSampler& sampler, std::string* model_path, std::string* error) {
  if (!make_dirs(c.output_dir, error)) return false;
  TrainableModel& model = family.model();
  TrainState st;
  st.step = step;
  st.rng_state = rng.state();
  auto pos = sampler.position();
  st.data_epoch = pos.epoch;
  st.data_shard = pos.shard;
  st.data_offset = pos.offset;
  st.num_parameters = model.num_parameters();
  *model_path = join_path(c.output_dir, model_file_name(step));
  // A bf16 model file rounds the master weights: the state keeps them whole, so a resume is
  // the run it continues, bit for bit.
  const FloatSource master = from_model(model, Stored::kMaster);
  const bool bf16_file = c.checkpoint_version == 5;
  // The marker is the checkpoint's manifest; manifest.json, the newest checkpoint's copy.
  const std::string manifest =
      manifest_json(c, model_file_name(step), step, model.num_parameters(), run_id, shard_list(sampler.shards()))
          .dump(2) +
      "\n";
  // DONE is written last: a crash before it leaves a checkpoint that resume ignores. One
  // left from an earlier run's checkpoint of this step goes first, or a failure half way
  // through would leave this run's model beside that run's state, marked complete.
  return remove_file(join_path(c.output_dir, done_file_name(step)), error) &&
         family.write_weights(*model_path, c.checkpoint_version, error) &&
         write_state_file(join_path(c.output_dir, state_file_name(step)), st, from_model(model, Stored::kFirstMoment),
                          from_model(model, Stored::kSecondMoment), error, bf16_file ? &master : nullptr) &&
         write_packing(c, step, sampler, error) &&
         write_file_atomic(join_path(c.output_dir, "manifest.json"), manifest, error) &&
         write_file_atomic(join_path(c.output_dir, done_file_name(step)), manifest, error);
}

bool load_checkpoint(const Start& start, ModelFamily& family, std::string* error) {
  TrainableModel& model = family.model();
  return family.read_weights(start.from, error) &&
         read_state_moments(start.state_path, start.state, into_model(model, Stored::kFirstMoment),
                            into_model(model, Stored::kSecondMoment), error) &&
         (!start.state.has_master ||
          read_state_master(start.state_path, start.state, into_model(model, Stored::kMaster), error));
}

bool load_init_optimizer(const std::string& state_path, ModelFamily& family, int* moment_steps, std::string* error) {
  TrainState st;
  if (!read_state_header(state_path, &st, error)) return false;
  if (st.num_parameters != family.num_parameters()) {
    *error = state_path + ": holds the moments of " + std::to_string(st.num_parameters) + " parameters, the model has " +
             std::to_string(family.num_parameters());
    return false;
  }
  TrainableModel& model = family.model();
  if (!read_state_moments(state_path, st, into_model(model, Stored::kFirstMoment),
                          into_model(model, Stored::kSecondMoment), error) ||
      (st.has_master && !read_state_master(state_path, st, into_model(model, Stored::kMaster), error)))
    return false;
  *moment_steps = st.step + read_marker(dir_name(state_path), st.step).moment_steps;
  return true;
}

}  // namespace nfn

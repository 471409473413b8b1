#include "cc/train/family.h"

#include "cc/ckpt/checkpoint.h"
#include "cc/ckpt/safetensors.h"
#include "cc/util/files.h"

namespace nfn {

std::string weights_family(const std::string& path) {
  FileReader file;
  int32_t magic = 0;
  std::string ignored;
  if (!file.open(path, &ignored) || file.size() < 4 || !file.read(0, &magic, 4, &ignored)) return "";
  if (magic == kModelMagic) return "gpt";
  SafetensorsInfo info;
  if (!read_safetensors_header(path, &info, &ignored)) return "";
  auto it = info.metadata.find("model_family");
  return it == info.metadata.end() ? "" : it->second;
}

std::unique_ptr<ModelFamily> make_family(const TrainConfig& c) {
  return decoder_family(c.model_family) ? make_decoder_family(c) : make_gpt_family(c);
}

}  // namespace nfn

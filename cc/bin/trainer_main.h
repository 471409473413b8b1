// The one main of every family's trainer binary (nfn_<family>_native_train): the checkpoint
// queries, the flags, the config and the run. A binary names its families; the first is what
// it trains when no --model-family is given, and a family it does not train is refused.
#pragma once

#include <initializer_list>
#include <string>

namespace nfn {

int trainer_main(const char* name, const char* about, std::initializer_list<const char*> families, int argc,
                 char** argv);

}  // namespace nfn

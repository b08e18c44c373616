// repl.h — the chat REPL of `kvrun -m model.gguf` (on a terminal, or with -i).
#pragma once

#include "commands.h"
#include "session.h"

namespace kvrun::tools {

/// Runs the chat loop on `l` until Ctrl-D, /exit or an error. Returns the exit code.
int run_repl(const RunOptions& opt, Loaded& l);

}  // namespace kvrun::tools

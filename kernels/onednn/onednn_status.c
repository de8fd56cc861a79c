/* kern_onednn_status_str (onednn.h), shared by the oneDNN build and the build without it. */
#include "onednn.h"

const char *kern_onednn_status_str(enum kern_onednn_status s) {
    switch (s) {
    case KERN_ONEDNN_OK: return "ok";
    case KERN_ONEDNN_UNAVAILABLE: return "oneDNN unavailable";
    case KERN_ONEDNN_UNSUPPORTED: return "unsupported by the oneDNN wrapper";
    case KERN_ONEDNN_LAYOUT_REFUSED: return "oneDNN layout refused (not the plain GGUF rows)";
    case KERN_ONEDNN_LIBRARY_ERROR: return "oneDNN call failed";
    }
    return "?";
}

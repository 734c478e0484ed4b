package launcher

// Version is the launcher's own version: changed only when the code mesh-launcher links
// changes, never stamped with the host's (an unchanged launcher builds to the same bytes in
// every release). A var, so the lab can build a "newer" launcher from the same tree.
var Version = "v1.1.0"

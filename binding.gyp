{
  "targets": [
    {
      "target_name": "uvs_tun",
      "sources": ["lb/native/tun.c", "lb/native/uring.c"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    }
  ]
}

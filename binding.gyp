{
  "targets": [
    {
      "target_name": "uvs_tun",
      "sources": ["lb/native/tun.c", "lb/native/uring.c", "lb/native/steer.c"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    }
  ]
}

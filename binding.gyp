{
  "targets": [
    {
      "target_name": "uvs_tun",
      "sources": ["lb/native/tun.c"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    }
  ]
}

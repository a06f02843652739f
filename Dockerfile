# uvs in a container. Build: docker build -t uvs .
# Run:  docker run --rm --cap-add NET_ADMIN --device /dev/net/tun -v $PWD/uvs.yaml:/etc/uvs/uvs.yaml uvs

FROM node:20-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json binding.gyp tsconfig.json tsconfig.build.json ./
COPY lb/native lb/native
RUN npm ci --no-audit --no-fund
# The sources .dockerignore lets through: the product folders, not the tests or perf results.
COPY . .
RUN npx tsc -p tsconfig.build.json && npm prune --omit=dev

FROM node:20-bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends iproute2 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/uvs
COPY --from=build /src/package.json ./
COPY --from=build /src/node_modules node_modules
COPY --from=build /src/build/Release/uvs_tun.node build/Release/uvs_tun.node
COPY --from=build /src/dist dist
COPY --from=build /src/uvs.example.yaml /etc/uvs/uvs.example.yaml
ENV UVS_SOCKET=/run/uvs/uvsd.sock
ENTRYPOINT ["node", "/opt/uvs/dist/control/uvsd.js"]
CMD ["--config", "/etc/uvs/uvs.yaml"]

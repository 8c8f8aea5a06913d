# Homebrew formula for fusion, built from source with Go.
#
# No release archive is published yet, so the formula installs the head of
# a checkout: from the root of a clone,
#
#   brew install --HEAD ./deploy/homebrew/fusion.rb
#
# (a release would add `url` and `sha256` lines for its archive here).
class Fusion < Formula
  desc "Pools Apple Silicon Macs into one LLM server (OpenAI, Anthropic, OpenClaw APIs)"
  # homepage and license come with the first published release.
  head "file://#{File.expand_path("../..", __dir__)}", using: :git, branch: "main"

  depends_on "go" => :build
  depends_on "mlx" => :recommended # MLX on the GPU, through libmlxc (see caveats)

  def install
    ldflags = "-s -w -X main.version=#{version}"
    system "go", "build", *std_go_args(ldflags: ldflags, output: bin/"fusion"), "./cmd/fusion"
    (etc/"fusion").mkpath
    (var/"fusion").mkpath
    (var/"log/fusion").mkpath
  end

  def post_install
    config = etc/"fusion/fusion.json"
    return if config.exist?

    config.write <<~JSON
      {
        "listen": "127.0.0.1:8000",
        "data_dir": "#{var}/fusion"
      }
    JSON
  end

  service do
    run [opt_bin/"fusion", "serve", "--config", etc/"fusion/fusion.json"]
    keep_alive crashed: true
    working_dir var/"fusion"
    log_path var/"log/fusion/fusion.log"
    error_log_path var/"log/fusion/fusion.err.log"
    environment_variables FUSION_LOG_FORMAT: "json"
  end

  def caveats
    <<~EOS
      fusion runs models on the GPU through libmlxc (MLX's C API), which it
      loads at run time. Build it once from the same checkout against
      Homebrew's mlx:
        make build-mlx
      and fusion finds it in ~/.cache/fusion/mlxc; or point FUSION_MLXC at
      a libmlxc.dylib (or the directory holding it). Without it fusion
      serves on its CPU backend (fusion health shows the backend in use).

      The service reads #{etc}/fusion/fusion.json (the keys are
      fusion serve's flags with _ for -); see deploy/README.md in the
      source for a 3-Mac cluster.
    EOS
  end

  test do
    assert_match "fusion #{version}", shell_output("#{bin}/fusion version")
    port = free_port
    pid = spawn bin/"fusion", "serve", "--listen", "127.0.0.1:#{port}", "--data-dir", testpath/"data"
    begin
      sleep 3
      assert_match "\"status\"", shell_output("curl -s http://127.0.0.1:#{port}/health")
    ensure
      Process.kill("TERM", pid)
      Process.wait(pid)
    end
  end
end

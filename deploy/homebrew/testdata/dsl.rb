# A stand-in for Homebrew's Formula DSL, enough to load deploy/homebrew/fusion.rb
# and print, as JSON, what it declares and what its install and service do.
# Used by deploy's TestHomebrewFormula (Homebrew itself is macOS/Linuxbrew).
require "json"
require "pathname"

class Formula
  @@decl = { "depends_on" => [], "system" => [] }
  def self.decl = @@decl
  def self.desc(s) = @@decl["desc"] = s
  def self.head(url, **opts) = @@decl["head"] = { "url" => url, "using" => opts[:using].to_s, "branch" => opts[:branch] }
  def self.depends_on(dep) = @@decl["depends_on"] << (dep.is_a?(Hash) ? dep.map { |k, v| "#{k}:#{v}" }.first : dep)
  def self.service(&blk) = @@decl["service_block"] = blk
  def self.test(&blk) = @@decl["test"] = true

  def version = "HEAD-test"
  def prefix = Pathname.new(ENV.fetch("PREFIX"))
  def bin = prefix/"bin"
  def opt_bin = prefix/"opt/bin"
  def etc = prefix/"etc"
  def var = prefix/"var"
  def std_go_args(ldflags:, output:) = ["-trimpath", "-o=#{output}", "-ldflags=#{ldflags}"]
  def system(*args) = @@decl["system"] << args.map(&:to_s)
end

# The service block runs on this object; the formula's paths (opt_bin,
# etc, var) come from the formula, as in Homebrew.
class ServiceDSL
  attr_reader :out
  def initialize(formula) = (@f = formula; @out = {})
  def run(args) = @out["run"] = args.map(&:to_s)
  def keep_alive(v) = @out["keep_alive"] = v
  def working_dir(v) = @out["working_dir"] = v.to_s
  def log_path(v) = @out["log_path"] = v.to_s
  def error_log_path(v) = @out["error_log_path"] = v.to_s
  def environment_variables(h) = @out["environment_variables"] = h.transform_keys(&:to_s)
  def method_missing(name, *args)
    return @f.public_send(name, *args) if @f.respond_to?(name)

    (@out["unknown"] ||= []) << name.to_s
  end

  def respond_to_missing?(*) = true
end

load ARGV[0]
f = Fusion.new
f.install
f.post_install
d = Formula.decl
svc = ServiceDSL.new(f)
svc.instance_eval(&d.delete("service_block"))
d["service"] = svc.out
d["caveats"] = f.caveats
d["config"] = File.read(f.etc/"fusion/fusion.json")
puts JSON.generate(d)
